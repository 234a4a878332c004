// Command sigworker is a stand-in worker process for the integration
// harness's own tests: it prints "ready pid=N", then "tick N" every -every
// until SIGTERM, on which it prints "terminating" and exits 0.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	every := flag.Duration("every", 20*time.Millisecond, "interval between tick lines")
	flag.Parse()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	fmt.Printf("ready pid=%d\n", os.Getpid())
	ticker := time.NewTicker(*every)
	defer ticker.Stop()
	for n := 1; ; n++ {
		select {
		case <-sigs:
			fmt.Println("terminating")
			return
		case <-ticker.C:
			fmt.Printf("tick %d\n", n)
		}
	}
}

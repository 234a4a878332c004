// Command pgbatch is shardflow's Postgres example: a sharded batch job in
// transactional mode that turns every row of pgbatch_source into one row
// of pgbatch_result, exactly once, across any number of worker processes
// coordinated by ZooKeeper. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/sources/postgres"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "seed":
		err = runSeed(ctx, os.Args[2:])
	case "verify":
		err = runVerify(ctx, os.Args[2:])
	case "work":
		err = runWork(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "pgbatch: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgbatch:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  pgbatch seed   --pg DSN --rows N
  pgbatch work   --pg DSN --zk HOSTS [--server-id ID] [--namespace NS] [--follow]
  pgbatch verify --pg DSN
`)
}

func runSeed(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	dsn := fs.String("pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN (default $SHARDFLOW_PG)")
	rows := fs.Int64("rows", 100000, "rows to append to pgbatch_source")
	_ = fs.Parse(args)
	if *rows <= 0 {
		return errors.New("seed: --rows must be > 0")
	}
	pool, err := postgres.Connect(ctx, *dsn, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := seed(ctx, pool, *rows)
	if err != nil {
		return err
	}
	d := time.Since(start)
	fmt.Printf("seeded %d rows in %s (%.0f rows/s)\n", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	return nil
}

func runVerify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	dsn := fs.String("pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN (default $SHARDFLOW_PG)")
	_ = fs.Parse(args)
	pool, err := postgres.Connect(ctx, *dsn, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := verify(ctx, pool)
	if err != nil {
		return err
	}
	return printJSON(os.Stdout, r)
}

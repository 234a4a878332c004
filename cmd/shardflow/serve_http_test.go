package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestServeHealthEndpoints: `serve --http` answers /healthz, /readyz
// (ready once the worker runs) and /metrics (the Go runtime's beside the
// jobs'), over real HTTP, until serve stops.
func TestServeHealthEndpoints(t *testing.T) {
	useMemstore(t, memstore.NewServer())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	served := make(chan int, 1)
	go func() {
		served <- run(ctx, []string{"serve", "--zk", "mem:1", "--namespace", "cli-health", "--server-id", "w1",
			"--allow-command", "/bin/true", "--http", "127.0.0.1:0", "--stop-grace", "5s"}, &out, &errOut)
	}()
	addr := regexp.MustCompile(`health endpoints on (http://\S+) `)
	testwait.For(t, 20*time.Second, "serve to start its worker", func() bool { return strings.Contains(out.String(), "serve: worker w1 running") })
	m := addr.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("serve did not print its health address:\n%s", out.String())
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "go_goroutines"} {
		resp, err := http.Get(m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d %q, want 200 containing %q", path, resp.StatusCode, body, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if code := testwait.Recv(t, 30*time.Second, "serve to stop", served); code != 0 {
		t.Fatalf("serve exit %d: %s", code, errOut.String())
	}
}

func TestServeHTTPAndGraceUsage(t *testing.T) {
	useMemstore(t, memstore.NewServer())
	for _, tt := range []struct {
		args   []string
		code   int
		phrase string
	}{
		{[]string{"--stop-grace", "0s"}, 2, "--stop-grace 0s must be positive"},
		{[]string{"--http", "127.0.0.1:notaport"}, 1, "--http 127.0.0.1:notaport"},
	} {
		_, errOut, code := runCLI(t, append([]string{"serve", "--zk", "mem:1", "--server-id", "w1", "--allow-command", "/bin/true"}, tt.args...)...)
		if code != tt.code || !strings.Contains(errOut, tt.phrase) {
			t.Errorf("serve %v: exit %d %q, want %d naming %q", tt.args, code, errOut, tt.code, tt.phrase)
		}
	}
}

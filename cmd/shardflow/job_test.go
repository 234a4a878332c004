package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// syncBuffer is a bytes.Buffer safe to write from the serve goroutine and
// read from the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestJobAddServeTriggerRemove: a script job added with `job add` is run by
// a `serve` worker when triggered (a one-off job: no cron), listed by `job
// list`, and dropped by `job remove`; a job outside the allow-list shows
// as refused.
func TestJobAddServeTriggerRemove(t *testing.T) {
	srv := memstore.NewServer()
	// Not useMemstore: serve dials from its own goroutine.
	prev := cli.DialStore
	cli.DialStore = func(context.Context, []string, *cli.ConnFlags) (store.Store, error) { return srv.Connect(), nil }
	t.Cleanup(func() { cli.DialStore = prev })
	dir := t.TempDir()
	zk := []string{"--zk", "mem:1", "--namespace", "cli-jobs"}

	out, errOut, code := runCLI(t, append([]string{"job", "add", "--job", "touch", "--type", "script", "--total", "2", "--timeout", "30s",
		"--command", `/bin/sh -c 'touch "$0/$SHARDFLOW_ITEM"' ` + dir}, zk...)...)
	if code != 0 || !strings.Contains(out, "SCRIPT job touch stored") || !strings.Contains(out, "when triggered") {
		t.Fatalf("job add: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, append([]string{"job", "add", "--job", "evil", "--type", "script", "--total", "1", "--command", "/usr/bin/touch " + dir + "/evil"}, zk...)...); code != 0 {
		t.Fatalf("job add evil: exit %d %s", code, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var serveOut, serveErr syncBuffer
	served := make(chan int, 1)
	go func() {
		served <- run(ctx, append([]string{"serve", "--server-id", "w1", "--allow-command", "/bin/sh -c * *"}, zk...), &serveOut, &serveErr)
	}()
	defer func() {
		cancel()
		if code := testwait.Recv(t, 30*time.Second, "serve to stop", served); code != 0 {
			t.Errorf("serve exit %d: %s", code, serveErr.String())
		}
	}()

	var rows []jobRow
	testwait.For(t, 20*time.Second, "job list to show the worker on touch and its refusal of evil", func() bool {
		out, _, code := runCLI(t, append([]string{"job", "list", "--json"}, zk...)...)
		rows = nil
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
			return false
		}
		return rows[1].Job == "touch" && rows[1].Servers == 1 && rows[0].Job == "evil" && len(rows[0].Refused) == 1
	})
	if r := rows[1]; r.Type != "SCRIPT" || r.Total != 2 || r.Timeout != "30s" || !strings.HasPrefix(r.Target, "/bin/sh -c") {
		t.Fatalf("job list row %+v", r)
	}
	out, _, _ = runCLI(t, append([]string{"status", "--job", "evil"}, zk...)...)
	if !strings.Contains(out, "REFUSED by w1: jobs: not allowed on this worker") {
		t.Fatalf("status of the refused job lacks the refusal:\n%s", out)
	}

	if out, errOut, code := runCLI(t, append([]string{"trigger", "--job", "touch"}, zk...)...); code != 0 {
		t.Fatalf("trigger: exit %d %s %s", code, out, errOut)
	}
	for _, item := range []string{"0", "1"} {
		testwait.For(t, 20*time.Second, "item "+item+" to run", func() bool {
			_, err := os.Stat(filepath.Join(dir, item))
			return err == nil
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "evil")); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran")
	}

	out, errOut, code = runCLI(t, append([]string{"job", "remove", "--job", "touch"}, zk...)...)
	if code != 0 || !strings.Contains(out, "job touch removed") {
		t.Fatalf("job remove: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, append([]string{"job", "list"}, zk...)...)
	if strings.Contains(out, "\ntouch ") || !strings.Contains(out, "\nevil ") {
		t.Fatalf("job list after remove:\n%s", out)
	}
}

func TestJobUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		phrase string
	}{
		{[]string{"job"}, "subcommand"},
		{[]string{"job", "add", "--job", "x", "--total", "1"}, "--type must be script or http"},
		{[]string{"job", "add", "--type", "script", "--total", "1", "--command", "/bin/true"}, "--job is required"},
		{[]string{"job", "add", "--job", "x", "--type", "script", "--total", "1"}, "scriptCommandLine: is empty"},
		{[]string{"job", "add", "--job", "x", "--type", "http", "--total", "1", "--url", "ftp://x"}, "httpUrl"},
		{[]string{"job", "add", "--job", "x", "--type", "script", "--total", "0", "--command", "/bin/true"}, "shardingTotalCount"},
		{[]string{"job", "remove", "--zk", "x"}, "--job is required"},
		{[]string{"serve", "--zk", "x"}, "--allow-command or --allow-url"},
		{[]string{"serve", "--zk", "x", "--allow-url", "ftp://x"}, "allowed URL"},
	} {
		_, errOut, code := runCLI(t, tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.phrase) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q", tt.args, code, errOut, tt.phrase)
		}
	}
}

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestACLsOnRealZooKeeper: on real ZooKeeper, a namespace created before
// --auth (world-writable, where an unauthenticated `job add` used to run
// on an --auth worker) is refused by authenticated commands and workers
// naming `acl fix`; `acl check` lists it, `acl fix` re-applies the ACLs,
// after which an unauthenticated `job add` is refused; with operator and
// worker identities a worker cannot change or add job definitions but
// can register; and a worker refuses a stored job whose config was left
// world-writable.
func TestACLsOnRealZooKeeper(t *testing.T) {
	zkSrv := integration.SharedZooKeeper(t)
	ctx := context.Background()
	dir := t.TempDir()
	opAuth, wkAuth := "ops:operator-password-1", "worker:worker-password-2"
	opFile := filepath.Join(dir, "op")
	if err := os.WriteFile(opFile, []byte(opAuth+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--zk", strings.Join(zkSrv.Servers(), ","), "--namespace", "acl"}
	cli := func(wantCode int, args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, wantCode, out, errOut)
		}
		return out + errOut
	}
	// Made without credentials: world-writable.
	cli(0, "job", "add", "--job", "early", "--type", "script", "--total", "1", "--command", "/bin/true")

	if out := cli(1, "status", "--auth-file", opFile); !strings.Contains(out, "world-writable") || !strings.Contains(out, "acl fix") {
		t.Errorf("status with --auth on an open namespace:\n%s", out)
	}
	if out := cli(1, "serve", "--auth-file", opFile, "--allow-command", "/bin/true"); !strings.Contains(out, "world-writable") {
		t.Errorf("serve with --auth on an open namespace:\n%s", out)
	}
	if out := cli(1, "acl", "check", "--auth-file", opFile); !strings.Contains(out, "/acl/early/config/scriptCommandLine: [world:anyone:cdrwa]") {
		t.Errorf("acl check:\n%s", out)
	}
	cli(0, "acl", "fix", "--auth-file", opFile)
	cli(0, "acl", "check", "--auth-file", opFile)
	cli(0, "status", "--auth-file", opFile)
	if out := cli(1, "job", "add", "--job", "squat", "--type", "script", "--total", "1", "--command", "/bin/true"); !strings.Contains(out, "not authorized") {
		t.Errorf("unauthenticated job add after acl fix:\n%s", out)
	}

	// Two identities.
	opDigest, wkDigest := zkstore.Digest(opAuth), zkstore.Digest(wkAuth)
	if out, _, code := runCLI(t, "acl", "digest", wkAuth); code != 0 || strings.TrimSpace(out) != wkDigest {
		t.Errorf("acl digest = %d %q, want %q", code, out, wkDigest)
	}
	ids := []string{"--operator-digest", opDigest, "--worker-digest", wkDigest}
	cli(0, append([]string{"acl", "fix", "--auth-file", opFile}, ids...)...)
	cli(0, append([]string{"job", "add", "--auth-file", opFile, "--job", "later", "--type", "script", "--total", "1", "--command", "/bin/true"}, ids...)...)
	worker, err := zkstore.Open(ctx, zkstore.Config{Servers: zkSrv.Servers(), Auth: wkAuth, OperatorDigest: opDigest, WorkerDigest: wkDigest})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	for _, job := range []string{"early", "later"} {
		if _, err := worker.Set(ctx, "/acl/"+job+"/config/scriptCommandLine", []byte("/bin/sh -c id"), -1); !errors.Is(err, store.ErrNoAuth) {
			t.Errorf("worker rewrote job %s's command: %v", job, err)
		}
		if _, err := worker.Create(ctx, "/acl/"+job+"/servers/w9", nil, store.Persistent); err != nil {
			t.Errorf("worker cannot register in job %s: %v", job, err)
		}
	}
	if _, err := worker.Create(ctx, "/acl/evil", nil, store.Persistent); !errors.Is(err, store.ErrNoAuth) {
		t.Errorf("worker added a job: %v", err)
	}
	if err := worker.Delete(ctx, "/acl/later/config/jobType", -1); !errors.Is(err, store.ErrNoAuth) {
		t.Errorf("worker deleted a config field: %v", err)
	}

	// A job whose config field was left world-writable is refused by an
	// authenticated worker.
	op, err := zkstore.Open(ctx, zkstore.Config{Servers: zkSrv.Servers(), Auth: opAuth})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.SetACL(ctx, "/acl/later/config/scriptCommandLine", zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan int, 1)
	var serveOut, serveErr syncBuffer
	go func() {
		served <- run(sctx, append([]string{"serve", "--server-id", "w1", "--auth", wkAuth, "--allow-command", "/bin/true"}, append(ids, conn...)...), &serveOut, &serveErr)
	}()
	testwait.For(t, 30*time.Second, "the worker to refuse job later (world-writable config)", func() bool {
		out, _, _ := runCLI(t, append([]string{"status", "--job", "later", "--auth-file", opFile}, conn...)...)
		return strings.Contains(out, "REFUSED by w1") && strings.Contains(out, "world-writable")
	})
	// The worker identity runs a job whose definition it cannot change.
	testwait.For(t, 30*time.Second, "the worker to join job early", func() bool {
		out, _, _ := runCLI(t, append([]string{"status", "--job", "early", "--auth-file", opFile}, conn...)...)
		return strings.Contains(out, "  w1  ") && strings.Contains(out, "READY") && strings.Contains(out, "leader w1")
	})
	cli(0, "trigger", "--auth-file", opFile, "--job", "early")
	cancel()
	if code := testwait.Recv(t, 30*time.Second, "serve to stop", served); code != 0 {
		t.Errorf("serve: exit %d\n%s", code, serveErr.String())
	}
	if strings.Contains(serveErr.String(), "not authorized") {
		t.Errorf("the worker identity was refused a write it needs:\n%s", serveErr.String())
	}
}

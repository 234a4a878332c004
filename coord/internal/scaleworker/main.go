// Command scaleworker is one coordination-only server of a job, as a real
// process, for coord's scale measurement (TestScaleZooKeeper and
// TestScalePostgres, `make bench-scale`): the test SIGKILLs it mid-run, so
// the store sees a crashed process (its connection gone, its session
// expiring after the timeout) rather than a cut proxy.
//
// It joins the job (failover on, no cron) on its own session (ZooKeeper,
// or Postgres with --coord) and
// prints "ready". Each SIGUSR1 then advances one step: Begin a run (prints
// "begun N items=K writes=W ops=O reads=R", K the items it owns, the
// counters cumulative since the start) or Complete the run it holds
// (prints "completed N writes=W ops=O reads=R"). N counts the steps from 1.
// A failure prints "error: ..." and exits 1; SIGTERM leaves the job and
// exits 0.
//
// Usage:
//
//	scaleworker --zk 127.0.0.1:2181 --root /chroot --namespace ns --job j \
//	    --server-id s2 --total 10000 [--session-timeout 2s]
//	scaleworker --coord postgres://... --schema s --namespace ns --job j \
//	    --server-id s2 --total 10000 [--session-timeout 2s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/internal/storecount"
)

func main() {
	if err := run(); err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	zk := flag.String("zk", "", "ZooKeeper servers, comma-separated host:port (this or --coord)")
	root := flag.String("root", "", "chroot of the session (the test backend's)")
	pgURL := flag.String("coord", "", "a postgres:// URL: coord/pgstore instead of ZooKeeper")
	schema := flag.String("schema", "", "pgstore schema of the tree (the test backend's)")
	ns := flag.String("namespace", "", "namespace (required)")
	job := flag.String("job", "", "job name (required)")
	id := flag.String("server-id", "", "server id (required)")
	total := flag.Int("total", 0, "shardingTotalCount (required, > 0)")
	timeout := flag.Duration("session-timeout", 2*time.Second, "session timeout")
	flag.Parse()
	switch {
	case (*zk == "") == (*pgURL == ""), *ns == "", *job == "", *id == "":
		return errors.New("one of --zk and --coord, and --namespace, --job and --server-id are required")
	case *total <= 0:
		return fmt.Errorf("--total %d: must be > 0", *total)
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var zs store.Store
	var err error
	if *pgURL != "" {
		zs, err = pgstore.Open(ctx, pgstore.Config{DSN: *pgURL, Schema: *schema, SessionTimeout: *timeout, Logger: logger})
	} else {
		zs, err = zkstore.Open(ctx, zkstore.Config{Servers: strings.Split(*zk, ","), Root: *root, SessionTimeout: *timeout, Logger: logger})
	}
	if err != nil {
		return err
	}
	defer func() { _ = zs.Close() }()
	cs := storecount.New(zs)
	reg, err := protocol.NewRegistry(cs, protocol.RegistryConfig{Namespace: *ns, ServerID: *id, HostName: "host-" + *id, Logger: logger})
	if err != nil {
		return err
	}
	cfg := jobconfig.Config{JobName: *job, ShardingTotalCount: *total, ReconcileInterval: time.Minute, Failover: true}
	j, err := reg.Join(ctx, cfg)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM)
	fmt.Println("ready")
	var r *protocol.Run
	for step := 1; ; step++ {
		if s := <-sigs; s == syscall.SIGTERM {
			return reg.Close(ctx)
		}
		c := cs.Counts()
		if r == nil {
			if r, err = j.Begin(ctx, time.Now()); err != nil {
				return err
			}
			c = cs.Counts()
			fmt.Printf("begun %d items=%d writes=%d ops=%d reads=%d\n", step, len(r.Shards()), c.Writes, c.MultiOps, c.Reads)
			continue
		}
		if err := r.Complete(ctx, time.Time{}); err != nil {
			return err
		}
		r = nil
		c = cs.Counts()
		fmt.Printf("completed %d writes=%d ops=%d reads=%d\n", step, c.Writes, c.MultiOps, c.Reads)
	}
}

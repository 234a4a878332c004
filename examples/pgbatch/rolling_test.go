package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestRollingRestart is a Kubernetes rollout of 3 pgbatch workers while
// rows keep coming: SIGTERM one worker, wait for it to exit, start its
// replacement under a new server id (a Deployment's new pod), wait for it
// to start, then the next; SHARDFLOW_ROLLING_REPLACEMENTS times (3 here,
// 10 in make bench-rolling). Every other worker stops with a 1 ms
// --stop-grace, so its batch in flight is cut (rolled back) rather than
// finished. The workers are slowed to at most 4,000 rows/s together
// (batches of 100 rows holding their transaction 200 ms, one per item at
// a time), so the backlog and the arrivals keep a run in flight at every
// stop. Then: no row lost, no duplicate effect, no failover run in
// the history (a graceful leave is not a crash), and it reports the spans
// during which an item had no live owner (ownerWatch), p99 and max. The
// replaced servers' nodes are OFFLINE without items at the end (no ghost).
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	replacements := envInt("SHARDFLOW_ROLLING_REPLACEMENTS", 3)
	backlog := envInt("SHARDFLOW_ROLLING_ROWS", 60_000) // at most 4,000 rows/s: outlasts the replacements
	c, pool := setupCluster(t, integration.SharedPostgres(t), 0, backlog)
	seeded := atomic.Int64{}
	seeded.Store(int64(backlog))

	const items = 8 // pgbatch's default --items
	mon, err := zkstore.Open(t.Context(), zkstore.Config{Servers: []string{c.zk}})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	owners := newOwnerWatch(mon, c.ns, "pgbatch", items)
	wctx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- owners.run(wctx) }()
	defer func() { stopWatch(); <-watchDone }()

	start := func(id string, grace time.Duration) *integration.Process {
		p := integration.StartProcess(t, c.bin, []string{"work", "--pg", c.dsn, "--zk", c.zk, "--server-id", id,
			"--namespace", c.ns, "--follow", "--session-timeout", sessionTimeout.String(), "--stop-grace", grace.String(),
			"--batch", "100", "--threads", "1", "--batch-delay", "200ms"}, nil)
		p.RequireLine(t, "work "+id+": started", 60*time.Second)
		return p
	}
	graceOf := func(n int) time.Duration { // every other worker started cuts its batch
		if n%2 == 1 {
			return time.Millisecond
		}
		return 30 * time.Second
	}
	workers := make([]*integration.Process, 3)
	graces := make([]time.Duration, len(workers))
	for i := range workers {
		graces[i] = graceOf(i)
		workers[i] = start(fmt.Sprintf("w%d", i), graces[i])
	}
	testwait.For(t, 60*time.Second, "every item owned by a live worker", owners.settled)
	owners.reset()

	// Rows keep coming while the workers are replaced.
	fctx, stopFeed := context.WithCancel(context.Background())
	var feeding sync.WaitGroup
	feeding.Add(1)
	go func() {
		defer feeding.Done()
		tick := time.NewTicker(100 * time.Millisecond) // the arrival rate, not a wait
		defer tick.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-tick.C:
			}
			// Appended as seed appends (not seed itself: its set-up's DDL
			// would take table locks under the workers every time).
			// Not on fctx: a cancel that lands after the INSERT committed
			// would drop its count, and every later range would collide
			// with the uncounted rows (the table then holds 200 rows more
			// than the test counts).
			next := seeded.Load() + 1
			if tag, err := pool.Exec(context.Background(), `INSERT INTO pgbatch_source (id, payload) SELECT g, 'payload-' || g FROM generate_series($1::bigint, $2::bigint) g`, next, next+199); err == nil {
				seeded.Add(tag.RowsAffected())
			}
		}
	}()

	// inRun waits until worker id has a run in flight (its live marker,
	// servers/{id}/run/live, exists), so that every stop drains, or cuts,
	// a batch: right after a join no run goes until the reshard is done.
	inRun := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		path := "/" + c.ns + "/pgbatch/servers/" + id + "/run/live"
		for {
			ok, _, ev, err := mon.ExistsW(ctx, path)
			if err != nil {
				t.Fatalf("waiting for a run of %s: %v", id, err)
			}
			if ok {
				return
			}
			select {
			case <-ev:
			case <-ctx.Done():
				t.Fatalf("no run of %s began within a minute", id)
			}
		}
	}
	ids := []string{"w0", "w1", "w2"}
	cut, shortStops := 0, 0
	for k := range replacements {
		slot := k % len(workers)
		if graces[slot] < time.Second {
			shortStops++
		}
		inRun(ids[slot])
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := workers[slot].Stop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("replacement %d: the worker in slot %d did not stop cleanly: %v", k+1, slot, err)
		}
		if strings.Contains(strings.Join(workers[slot].Lines(), "\n"), "runs cancelled") {
			cut++
		}
		graces[slot] = graceOf(len(workers) + k)
		ids[slot] = fmt.Sprintf("w%d-%d", slot, k+1)
		workers[slot] = start(ids[slot], graces[slot])
	}
	stopFeed()
	feeding.Wait()
	testwait.For(t, 60*time.Second, "every item owned after the last replacement", owners.settled)
	gaps, reads := owners.result()
	stopWatch()
	// The replaced servers left no ghost: their nodes are OFFLINE without
	// items, and only the current ids are online.
	status, err := coord.NewAdmin(mon, c.ns).Status(context.Background(), "pgbatch")
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range status.Servers {
		if current := slices.Contains(ids, srv.ID); current == (srv.Status == "OFFLINE") || (!current && len(srv.Sharding) > 0) {
			t.Errorf("server %s after the rollout: %s with items %v (current ids %v)", srv.ID, srv.Status, srv.Sharding, ids)
		}
	}

	r := waitDone(t, pool, doneStall, nil)
	// Stop the workers gracefully: their history buffers flush.
	for _, w := range workers {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := w.Stop(ctx); err != nil {
			t.Errorf("final stop: %v", err)
		}
		cancel()
	}
	var failoverRuns, runs int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE source = 'failover'), count(*) FROM shardflow_history`).Scan(&failoverRuns, &runs); err != nil {
		t.Fatal(err)
	}
	t.Logf("ROLLING replacements=%d rows=%d lost=%d duplicate_effects=%d failover_runs=%d (of %d item runs) cut_stops=%d/%d ownerless_spans=%d p99=%s max=%s (watch reads %d)",
		replacements, r.Rows, r.Lost, r.DuplicateEffects, failoverRuns, runs, cut, shortStops, len(gaps),
		percentile(gaps, 99).Round(time.Millisecond), percentile(gaps, 100).Round(time.Millisecond), reads)
	checkExactlyOnce(t, r, int(seeded.Load()))
	if cut != shortStops {
		t.Fatalf("%d of the %d stops with a 1 ms grace cut a run in flight, want all", cut, shortStops)
	}
	if failoverRuns != 0 {
		t.Fatalf("%d failover runs in the history: a graceful stop must not look like a crash", failoverRuns)
	}
}

package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// dependentsReads records when a store was asked for a job's workflow
// dependents (isFirst's read).
type dependentsReads struct {
	store.Store
	mu    sync.Mutex
	reads []time.Time
}

func (d *dependentsReads) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	if strings.HasSuffix(path, "/workflow/dependents") {
		d.mu.Lock()
		d.reads = append(d.reads, time.Now())
		d.mu.Unlock()
	}
	return d.Store.Children(ctx, path)
}

func (d *dependentsReads) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.reads)
}

// readsAtBeforeRun sends, at each BeforeRun, how many dependents reads
// the store had had by then.
type readsAtBeforeRun struct {
	st *dependentsReads
	c  chan int
}

func (l readsAtBeforeRun) BeforeRun(context.Context, RunInfo)         { l.c <- l.st.count() }
func (readsAtBeforeRun) AfterRun(context.Context, RunInfo, RunResult) {}

// TestFirstReadOffTheRunPath: a job's answer to "do jobs depend on me"
// (isFirst, kept for the reconcile interval) is read again after a run
// once it is half the interval old, so that a run at the interval's end
// does not read it between its start and BeforeRun: with many jobs on one
// cron that read was queued behind every other job's, once an interval.
// On the fake clock (synctest): the first run reads it; a run 6 s later
// (interval 10 s) reads it after itself; a run 12 s after the first
// reads nothing before its BeforeRun. Before the refresh, that third run
// read it (its answer was 12 s old).
func TestFirstReadOffTheRunPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		st := &dependentsReads{Store: srv.Connect()}
		node, err := NewNode(NodeConfig{Store: st, Namespace: "firstread", ServerID: "s1", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		before := readsAtBeforeRun{st: st, c: make(chan int, 4)}
		cfg := JobConfig{JobName: "j", ShardingTotalCount: 1, ReconcileInterval: 10 * time.Second}
		if err := AddJob[int](t.Context(), node, cfg, idleJob{}, WithListeners(before)); err != nil {
			t.Fatal(err)
		}
		if err := node.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := node.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		run := func() (readsOnPath int) {
			t.Helper()
			start := st.count()
			if err := node.TriggerLocal("j"); err != nil {
				t.Fatal(err)
			}
			n := <-before.c - start
			synctest.Wait() // the run and what its runner does after it are over
			return n
		}
		if n := run(); n == 0 {
			t.Fatal("first run: no dependents read before BeforeRun: nothing was known yet")
		}
		time.Sleep(6 * time.Second) // the fake clock: half the interval on
		if n := run(); n != 0 {
			t.Fatalf("run at 6 s: %d dependents reads before BeforeRun, want 0 (answer 6 s old)", n)
		}
		time.Sleep(6 * time.Second)
		if n := run(); n != 0 {
			t.Fatalf("run at 12 s: %d dependents reads before BeforeRun, want 0 (read again after the run at 6 s)", n)
		}
	})
}

// TestFirstReadsSpreadAfterATick: the refreshes that come due together,
// after the runs of jobs on one tick, are not read at that tick but each
// at its job's own offset into the next quarter interval. Before, every
// job read right after its run: 10,000 jobs on one cron sent their reads
// together, once every two or three ticks, and that tick's runs started
// late behind them. On the fake clock (synctest), 40 jobs, interval 40 s:
// runs at 0 (each reads on its path: nothing known yet) and at 25 s; no
// read at 25 s, 40 within the next 10 s, at many instants.
func TestFirstReadsSpreadAfterATick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		st := &dependentsReads{Store: srv.Connect()}
		node, err := NewNode(NodeConfig{Store: st, Namespace: "firstspread", ServerID: "s1", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		const jobs = 40
		for i := range jobs {
			cfg := JobConfig{JobName: fmt.Sprintf("j%02d", i), ShardingTotalCount: 1, ReconcileInterval: 40 * time.Second}
			if err := AddJob[int](t.Context(), node, cfg, idleJob{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := node.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := node.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		tick := func() {
			t.Helper()
			for i := range jobs {
				if err := node.TriggerLocal(fmt.Sprintf("j%02d", i)); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait() // the runs and what their runners do after them are over
		}
		tick()
		first := st.count()
		time.Sleep(25 * time.Second)
		at := time.Now()
		tick()
		if n := st.count() - first; n != 0 {
			t.Fatalf("%d dependents reads at the tick that made them due, want 0", n)
		}
		time.Sleep(10 * time.Second)
		st.mu.Lock()
		reads := slices.Clone(st.reads[first:])
		st.mu.Unlock()
		if len(reads) != jobs {
			t.Fatalf("%d dependents reads in the quarter interval after the tick, want %d", len(reads), jobs)
		}
		instants := map[time.Duration]bool{}
		for _, r := range reads {
			instants[r.Sub(at)] = true
		}
		if len(instants) < jobs/2 {
			t.Fatalf("the %d reads at %d instants, want them spread (at least %d)", jobs, len(instants), jobs/2)
		}
	})
}

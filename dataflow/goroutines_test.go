package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/testwait"
)

// idleJobGoroutinesPer10 is the goroutines ten idle jobs may cost a
// started Node at rest (issue 15: at most 0.1 per job). coord runs every
// job's watcher on its Registry's event loop (one session follower, and
// workers only while jobs have events), signals are handled there
// (protocol.Job.OnSignal), the count reports of all jobs share the Node's
// stats.Group, and the scheduler starts a job's runner only when a run is
// due: what remains is per Node, not per job.
const idleJobGoroutinesPer10 = 1

// TestNodeIdleJobGoroutines: 1,000 idle jobs on a started Node cost at
// most idleJobGoroutinesPer10 goroutines per ten jobs at rest, and Stop
// takes every one of them back. A count, not a time: the same on any
// machine.
func TestNodeIdleJobGoroutines(t *testing.T) {
	const jobs = 1000
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "g", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	var g errgroup.Group
	g.SetLimit(8)
	for i := range jobs {
		g.Go(func() error {
			cfg := JobConfig{JobName: fmt.Sprintf("idle%d", i), ShardingTotalCount: 4, Cron: "0 0 0 * * ?"}
			return AddJob(t.Context(), n, cfg, Job[int](idleJob{}))
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Joining leaves no goroutine behind once the watchers settle.
	limit := jobs * idleJobGoroutinesPer10 / 10
	testwait.For(t, 30*time.Second, fmt.Sprintf("at most %d goroutines for %d idle jobs", limit, jobs), func() bool {
		return runtime.NumGoroutine()-base <= limit
	})
	t.Logf("%d idle jobs: %d goroutines", jobs, runtime.NumGoroutine()-base)
	stopNode(t, n)
	testwait.For(t, 10*time.Second, "the jobs' goroutines gone after Stop", func() bool {
		return runtime.NumGoroutine() < base
	})
}

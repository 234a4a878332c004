package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/shardflow/shardflow/internal/testwait"
)

// idleJobGoroutines is the goroutines an idle job costs a started Node:
// coord's job watcher. Signals are handled in it (coord.Job.OnSignal), the
// count reports of all jobs share the Node's stats.Group, and the
// scheduler starts a job's runner only when a run is due.
const idleJobGoroutines = 1

// TestNodeIdleJobGoroutines: 40 idle jobs on a started Node cost at most
// idleJobGoroutines each at rest (a constant per job, whatever the number
// of jobs), and Stop takes every one of them back. A count, not a time:
// the same on any machine.
func TestNodeIdleJobGoroutines(t *testing.T) {
	const jobs = 40
	n, err := NewNode(NodeConfig{ServerID: "g", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	for i := range jobs {
		cfg := JobConfig{JobName: fmt.Sprintf("idle%d", i), ShardingTotalCount: 4, Cron: "0 0 0 * * ?"}
		if err := AddJob(n, cfg, Job[int](idleJob{})); err != nil {
			t.Fatal(err)
		}
	}
	// Joining leaves no goroutine behind once the watchers settle.
	testwait.For(t, 10*time.Second, fmt.Sprintf("at most %d goroutines per idle job", idleJobGoroutines), func() bool {
		return runtime.NumGoroutine()-base <= jobs*idleJobGoroutines
	})
	t.Logf("%d idle jobs: %d goroutines", jobs, runtime.NumGoroutine()-base)
	stopNode(t, n)
	testwait.For(t, 10*time.Second, "the jobs' goroutines gone after Stop", func() bool {
		return runtime.NumGoroutine() < base
	})
}

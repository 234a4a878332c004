package dataflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/internal/testwait"
)

// effects records every item run of a workflow test: the order in which
// items begin and end, and how many times each (workflow run, job, item)
// ran to its end.
type effects struct {
	seq atomic.Int64

	mu    sync.Mutex
	runs  map[string]int   // run|job|item -> completed runs
	begin map[string]int64 // run|job -> first begin
	end   map[string]int64 // run|job -> last end
	done  map[string]int   // run|job -> items completed
	// waiters get the run's id when job's items all completed in it.
	waiters map[string]chan struct{}
}

func newEffects() *effects {
	return &effects{runs: map[string]int{}, begin: map[string]int64{}, end: map[string]int64{}, done: map[string]int{}, waiters: map[string]chan struct{}{}}
}

func (e *effects) job(total int) SimpleFunc {
	return func(ctx context.Context, s Shard) error {
		if s.WorkflowRun == "" {
			return fmt.Errorf("item %d of %s ran outside a workflow run", s.Item, s.JobName)
		}
		b := e.seq.Add(1)
		step := s.WorkflowRun + "|" + s.JobName
		e.mu.Lock()
		if v, ok := e.begin[step]; !ok || b < v {
			e.begin[step] = b
		}
		e.mu.Unlock()
		end := e.seq.Add(1)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.runs[fmt.Sprintf("%s|%d", step, s.Item)]++
		e.end[step] = max(e.end[step], end)
		e.done[step]++
		if e.done[step] == total {
			e.waiter(step)
			close(e.waiters[step])
		}
		return nil
	}
}

// waiter returns the channel closed when step completes; under mu.
func (e *effects) waiter(step string) chan struct{} {
	ch, ok := e.waiters[step]
	if !ok {
		ch = make(chan struct{})
		e.waiters[step] = ch
	}
	return ch
}

func (e *effects) wait(t *testing.T, step string) {
	t.Helper()
	e.mu.Lock()
	ch := e.waiter(step)
	e.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("step %s did not complete in 30s", step)
	}
}

// TestWorkflowChainHundredRuns: a 5-step chain s0 -> s1 -> s2 -> s3 -> s4
// of 4 items each over two servers on the embedded store, 100 workflow
// runs started by triggering s0: in every workflow run every item of
// every step runs exactly once, no step's item begins before every item
// of the step before it ended, and each step completes promptly (30 s at
// most, no reconcile tick needed).
func TestWorkflowChainHundredRuns(t *testing.T) {
	const steps, total, runs = 5, 4, 100
	srv := memstore.NewServer()
	e := newEffects()
	var nodes []*Node
	hist := history.NewMemory(runs * steps * total)
	for _, id := range []string{"s1", "s2"} {
		n, err := NewNode(NodeConfig{Store: srv.Connect(), ServerID: id, Namespace: "chain", Logger: quietLogger(), History: hist})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		t.Cleanup(func() { _ = n.Stop(context.Background()) })
	}
	ctx := t.Context()
	for i := range steps {
		// A 1 s reconcile: the kicks run beside the triggers (they ran
		// items of a second workflow run started beside the first).
		cfg := JobConfig{JobName: fmt.Sprintf("s%d", i), ShardingTotalCount: total, ReconcileInterval: time.Second}
		if i > 0 {
			cfg.DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
		for _, n := range nodes {
			if err := AddSimpleJob(ctx, n, cfg, e.job(total)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range nodes {
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for r := 1; r <= runs; r++ {
		if err := nodes[0].TriggerAll(ctx, "s0"); err != nil {
			t.Fatal(err)
		}
		e.wait(t, workflow.RunID("s0", int64(r))+fmt.Sprintf("|s%d", steps-1))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for r := 1; r <= runs; r++ {
		run := workflow.RunID("s0", int64(r))
		for s := range steps {
			for i := range total {
				if got := e.runs[fmt.Sprintf("%s|s%d|%d", run, s, i)]; got != 1 {
					t.Errorf("%s: item %d of s%d ran %d times, want 1", run, i, s, got)
				}
			}
			if s > 0 {
				prev, cur := fmt.Sprintf("%s|s%d", run, s-1), fmt.Sprintf("%s|s%d", run, s)
				if e.begin[cur] < e.end[prev] {
					t.Errorf("%s: s%d began (at %d) before s%d ended (at %d)", run, s, e.begin[cur], s-1, e.end[prev])
				}
			}
		}
	}
	if n := len(e.runs); n != runs*steps*total {
		t.Errorf("%d item runs recorded, want %d (one per workflow run, step and item)", n, runs*steps*total)
	}
	// History has every item run under its workflow run (the last step's
	// records come after its items' effects: wait for them).
	last := workflow.RunID("s0", runs)
	testwait.For(t, 10*time.Second, "history of "+last, func() bool {
		recs, _ := hist.Runs(ctx, history.Filter{WorkflowRun: last})
		return len(recs) == steps*total
	})
	recs, _ := hist.Runs(ctx, history.Filter{WorkflowRun: workflow.RunID("s0", 1)})
	if len(recs) != steps*total {
		t.Errorf("history of %s: %d item runs, want %d", workflow.RunID("s0", 1), len(recs), steps*total)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestWorkflowUpstreamFailure: an item of the first job fails: under the
// default policy the job after it does not run in that workflow run (its
// step stopped, and the step after it too); a job whose upstreamFailure
// is run runs anyway. The next workflow run, with no failure, runs every
// step.
func TestWorkflowUpstreamFailure(t *testing.T) {
	srv := memstore.NewServer()
	n, err := NewNode(NodeConfig{Store: srv.Connect(), ServerID: "s1", Namespace: "fail", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	ctx := t.Context()
	var mu sync.Mutex
	ran := map[string]int{} // run|job -> items run
	fail := true
	job := func(ctx context.Context, s Shard) error {
		mu.Lock()
		defer mu.Unlock()
		ran[s.WorkflowRun+"|"+s.JobName]++
		if s.JobName == "a" && s.Item == 1 && fail {
			return fmt.Errorf("item 1 fails")
		}
		return nil
	}
	for _, cfg := range []JobConfig{
		{JobName: "a"},
		{JobName: "stop", DependsOn: []string{"a"}},
		{JobName: "after-stop", DependsOn: []string{"stop"}, UpstreamFailure: "run"},
		{JobName: "anyway", DependsOn: []string{"a"}, UpstreamFailure: "run"},
	} {
		cfg.ShardingTotalCount = 2
		if err := AddSimpleJob(ctx, n, cfg, job); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	decided := func(run string) map[string]string {
		states := map[string]string{}
		testwait.For(t, 20*time.Second, "every step of "+run+" decided", func() bool {
			rs, err := workflow.ReadRun(ctx, n.Store(), "fail", run)
			if err != nil {
				return false
			}
			for _, s := range rs.Steps {
				if !s.Decided() {
					return false
				}
				states[s.Job] = s.State
			}
			return true
		})
		return states
	}
	if err := n.TriggerLocal("a"); err != nil {
		t.Fatal(err)
	}
	run := workflow.RunID("a", 1)
	got := decided(run)
	want := map[string]string{"a": workflow.StateFailed, "stop": workflow.StateStopped, "after-stop": workflow.StateSucceeded, "anyway": workflow.StateSucceeded}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: steps %v, want %v", run, got, want)
	}
	mu.Lock()
	if ran[run+"|stop"] != 0 || ran[run+"|anyway"] != 2 || ran[run+"|after-stop"] != 2 {
		t.Fatalf("%s: items run %v; want none of stop, both of anyway and after-stop (its policy is run)", run, ran)
	}
	fail = false
	mu.Unlock()

	if err := n.TriggerLocal("a"); err != nil {
		t.Fatal(err)
	}
	run = workflow.RunID("a", 2)
	for j, s := range decided(run) {
		if s != workflow.StateSucceeded {
			t.Errorf("%s: %s %s, want succeeded", run, j, s)
		}
	}
}

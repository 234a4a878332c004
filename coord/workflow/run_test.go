package workflow_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

const ns = "wf"

// diamond stores a -> {b, c} -> d, total items each, with d's
// upstreamFailure policy dPolicy.
func diamond(t *testing.T, st store.Store, total int, dPolicy jobconfig.UpstreamFailure) {
	t.Helper()
	admin := coord.NewAdmin(st, ns)
	for _, c := range []jobconfig.Config{
		{JobName: "a"},
		{JobName: "b", DependsOn: []string{"a"}},
		{JobName: "c", DependsOn: []string{"a"}},
		{JobName: "d", DependsOn: []string{"b", "c"}, UpstreamFailure: dPolicy},
	} {
		c.ShardingTotalCount = total
		if err := admin.CreateJob(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
}

func items(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func outcomes(items []int, failed ...int) map[int]string {
	m := map[int]string{}
	for _, i := range items {
		m[i] = ""
	}
	for _, i := range failed {
		m[i] = "boom"
	}
	return m
}

func state(t *testing.T, st store.Store, job, run string) workflow.Step {
	t.Helper()
	s, _, err := workflow.ReadStep(t.Context(), st, ns, job, run)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDiamondStartsTheJoinOnce: b and c complete their last items in the
// same instant from two sessions, many times over: d's step is started by
// exactly one of the two transactions every time (neither both, nor none).
func TestDiamondStartsTheJoinOnce(t *testing.T) {
	srv := memstore.NewServer()
	st1, st2 := srv.Connect(), srv.Connect()
	diamond(t, st1, 2, "")
	ctx := t.Context()
	a := workflow.ForJob(st1, ns, "a")
	for r := 1; r <= 200; r++ {
		pick, err := a.Pick(ctx, items(2), nil, true, 2)
		if err != nil || pick.Run != workflow.RunID("a", int64(r)) {
			t.Fatalf("run %d: Pick = %+v, %v; want a new workflow run", r, pick, err)
		}
		started, err := a.Record(ctx, pick.Run, outcomes(items(2)))
		if err != nil || !slices.Equal(started, []string{"b", "c"}) {
			t.Fatalf("%s: a's completion started %v, %v; want [b c]", pick.Run, started, err)
		}
		// Item 0 of b and c first, then item 1 of both at once.
		b, c := workflow.ForJob(st1, ns, "b"), workflow.ForJob(st2, ns, "c")
		for _, s := range []*workflow.Steps{b, c} {
			if _, err := s.Record(ctx, pick.Run, outcomes([]int{0})); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var startedD int
		for _, s := range []*workflow.Steps{b, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.Record(ctx, pick.Run, outcomes([]int{1}))
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				startedD += len(got)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if startedD != 1 {
			t.Fatalf("%s: d started by %d of the two last completions, want exactly 1", pick.Run, startedD)
		}
		if s := state(t, st1, "d", pick.Run); s.State != workflow.StateRunning || s.Total != 2 {
			t.Fatalf("%s: d's step %+v, want running with 2 items", pick.Run, s)
		}
		d := workflow.ForJob(st2, ns, "d")
		if got, err := d.Pick(ctx, items(2), []string{"b", "c"}, false, 2); err != nil || got.Run != pick.Run || len(got.Items) != 2 {
			t.Fatalf("%s: d's Pick = %+v, %v; want both items in this run", pick.Run, got, err)
		}
		if _, err := d.Record(ctx, pick.Run, outcomes(items(2))); err != nil {
			t.Fatal(err)
		}
		if s := state(t, st1, "d", pick.Run); s.State != workflow.StateSucceeded {
			t.Fatalf("%s: d's step %+v, want succeeded", pick.Run, s)
		}
	}
	// The last workflow.KeepRuns runs are kept, the older ones pruned.
	for _, j := range []string{"a", "b", "c", "d"} {
		if _, _, err := workflow.ReadStep(ctx, st1, ns, j, workflow.RunID("a", 200-workflow.KeepRuns)); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("%s's step of run %d: %v, want pruned", j, 200-workflow.KeepRuns, err)
		}
		if _, _, err := workflow.ReadStep(ctx, st1, ns, j, workflow.RunID("a", 201-workflow.KeepRuns)); err != nil {
			t.Errorf("%s's step of run %d: %v, want kept", j, 201-workflow.KeepRuns, err)
		}
	}
}

// TestPickServesTheOldestRunItsItemsOwe: a run whose items completed in
// the open workflow run starts a new one; an item cut in the first run
// (its failover run) serves the first run; a completed item is never
// handed out again in its run; a dependent job with nothing to do gets
// nothing.
func TestPickServesTheOldestRunItsItemsOwe(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 4, "")
	ctx := t.Context()
	a := workflow.ForJob(st, ns, "a")
	p1, err := a.Pick(ctx, []int{0, 1}, nil, true, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Record(ctx, p1.Run, outcomes([]int{0})); err != nil { // item 1 cut
		t.Fatal(err)
	}
	p2, err := a.Pick(ctx, []int{0}, nil, true, 4)
	if err != nil || p2.Run == p1.Run {
		t.Fatalf("item 0, completed in %s, picked %+v, %v; want a new workflow run", p1.Run, p2, err)
	}
	p3, err := a.Pick(ctx, []int{1}, nil, true, 4)
	if err != nil || p3.Run != p1.Run || !slices.Equal(p3.Items, []int{1}) {
		t.Fatalf("the cut item 1 picked %+v, %v; want it in %s", p3, err, p1.Run)
	}
	p4, err := a.Pick(ctx, []int{0, 1, 2, 3}, nil, true, 4)
	if err != nil || p4.Run != p1.Run || !slices.Equal(p4.Items, []int{1, 2, 3}) {
		t.Fatalf("every item picked %+v, %v; want items 1-3 of %s", p4, err, p1.Run)
	}
	d := workflow.ForJob(st, ns, "d")
	if got, err := d.Pick(ctx, items(4), []string{"b", "c"}, false, 4); err != nil || got.Run != "" || got.Items != nil {
		t.Fatalf("d with no step open picked %+v, %v; want nothing", got, err)
	}
}

// TestUpstreamFailurePolicy: a failed step stops the steps after it
// (transitively) unless their policy is run.
func TestUpstreamFailurePolicy(t *testing.T) {
	for _, tc := range []struct {
		policy jobconfig.UpstreamFailure
		want   string
	}{{"", workflow.StateStopped}, {jobconfig.UpstreamFailureRun, workflow.StatePending}} {
		t.Run(fmt.Sprintf("policy=%q", tc.policy), func(t *testing.T) {
			st := memstore.NewServer().Connect()
			diamond(t, st, 2, tc.policy)
			ctx := t.Context()
			a := workflow.ForJob(st, ns, "a")
			pick, err := a.Pick(ctx, items(2), nil, true, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Record(ctx, pick.Run, outcomes(items(2))); err != nil {
				t.Fatal(err)
			}
			// b fails; d waits for c either way.
			if _, err := workflow.ForJob(st, ns, "b").Record(ctx, pick.Run, outcomes(items(2), 1)); err != nil {
				t.Fatal(err)
			}
			if s := state(t, st, "b", pick.Run); s.State != workflow.StateFailed || s.Failed != 1 {
				t.Fatalf("b's step %+v, want failed with 1 failed item", s)
			}
			if s := state(t, st, "d", pick.Run); s.State != workflow.StatePending {
				t.Fatalf("d's step %+v before c completed, want pending", s)
			}
			started, err := workflow.ForJob(st, ns, "c").Record(ctx, pick.Run, outcomes(items(2)))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == workflow.StatePending {
				want = workflow.StateRunning
				if !slices.Equal(started, []string{"d"}) {
					t.Fatalf("c's completion started %v, want [d]", started)
				}
			} else if len(started) != 0 {
				t.Fatalf("c's completion started %v, want none", started)
			}
			if s := state(t, st, "d", pick.Run); s.State != want {
				t.Fatalf("d's step %+v, want %s", s, want)
			}
		})
	}
}

// TestMarkSucceeded: b failed, so d stopped; an operator marks b
// succeeded: d starts in the same workflow run, and MarkSucceeded says so.
// A succeeded step cannot be marked.
func TestMarkSucceeded(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	a := workflow.ForJob(st, ns, "a")
	pick, err := a.Pick(ctx, items(2), nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		job    string
		failed []int
	}{{"a", nil}, {"b", []int{0}}, {"c", nil}} {
		if _, err := workflow.ForJob(st, ns, r.job).Record(ctx, pick.Run, outcomes(items(2), r.failed...)); err != nil {
			t.Fatal(err)
		}
	}
	if s := state(t, st, "d", pick.Run); s.State != workflow.StateStopped {
		t.Fatalf("d's step %+v after b failed, want stopped", s)
	}
	if started, err := workflow.MarkSucceeded(ctx, st, ns, pick.Run, "c"); !errors.Is(err, workflow.ErrMark) || started != nil {
		t.Fatalf("marking succeeded c: %v %v, want ErrMark, nothing started", started, err)
	}
	if started, err := workflow.MarkSucceeded(ctx, st, ns, pick.Run, "b"); err != nil || !slices.Equal(started, []string{"d"}) {
		t.Fatalf("marking succeeded b: started %v, %v; want d started", started, err)
	}
	if s := state(t, st, "b", pick.Run); s.State != workflow.StateSucceeded || s.Failed != 1 {
		t.Fatalf("b's step %+v, want succeeded, its failed item still counted", s)
	}
	if s := state(t, st, "d", pick.Run); s.State != workflow.StateRunning || s.Total != 2 {
		t.Fatalf("d's step %+v, want running", s)
	}
	if open, err := workflow.ForJob(st, ns, "d").Open(ctx); err != nil || len(open) != 1 || open[0] != pick.Run {
		t.Fatalf("d's open runs %v, %v; want %s", open, err, pick.Run)
	}
}

// TestRemovedJobs: a job removed during a workflow run (its step with
// it) counts as stopped for the steps after it, and status shows it
// removed; with the first job removed, the other steps still record
// their items and are decided (no record fails, so no item runs again).
func TestRemovedJobs(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	a := workflow.ForJob(st, ns, "a")
	pick, err := a.Pick(ctx, items(2), nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Record(ctx, pick.Run, outcomes(items(2))); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteAll(ctx, st, store.Join(ns, "c")); err != nil {
		t.Fatal(err)
	}
	started, err := workflow.ForJob(st, ns, "b").Record(ctx, pick.Run, outcomes(items(2)))
	if err != nil || len(started) != 0 {
		t.Fatalf("b's completion with c removed: started %v, %v; want none and no error", started, err)
	}
	if s := state(t, st, "d", pick.Run); s.State != workflow.StateStopped {
		t.Fatalf("d's step %+v with c removed, want stopped", s)
	}
	rs, err := workflow.ReadRun(ctx, st, ns, pick.Run)
	if err != nil || rs.Steps[2].Job != "c" || rs.Steps[2].State != workflow.StateRemoved {
		t.Fatalf("ReadRun: %+v, %v; want c removed", rs, err)
	}

	// The first job removed in the middle of the next workflow run.
	pick, err = a.Pick(ctx, items(2), nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Record(ctx, pick.Run, outcomes(items(2))); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteAll(ctx, st, store.Join(ns, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := workflow.ForJob(st, ns, "b").Record(ctx, pick.Run, outcomes(items(2))); err != nil {
		t.Fatalf("b's completion with a removed: %v", err)
	}
	if s := state(t, st, "b", pick.Run); s.State != workflow.StateSucceeded {
		t.Fatalf("b's step %+v, want succeeded", s)
	}
}

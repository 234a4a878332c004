package workflow_test

import (
	"context"
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// TestPickJoinsARunStartedDuringIt: two servers of the first job fire at
// once, each owning half of its items. Server 1's Pick lists the open
// workflow runs (none) and, before it reads the run counter, server 2
// starts workflow run 1. Server 1's Pick must serve run 1 (its items are
// owed there), not start run 2: run 1 would wait for server 1's items
// until a reconcile kick (TestWorkflowChainHundredRuns stalled on it,
// and with a 1 s reconcile recorded item runs of a spurious run).
func TestPickJoinsARunStartedDuringIt(t *testing.T) {
	srv := memstore.NewServer()
	base := srv.Connect()
	diamond(t, base, 4, "")
	hs := &coordtest.HookStore{Store: srv.Connect()}
	ctx := t.Context()
	s1 := workflow.ForJob(hs, ns, "a")
	s2 := workflow.ForJob(base, ns, "a")
	// Create the counter first: Pick then plans on it at once.
	if _, err := s2.Pick(ctx, []int{0, 1, 2, 3}, nil, true, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Record(ctx, workflow.RunID("a", 1), outcomes(items(4))); err != nil {
		t.Fatal(err)
	}
	var started workflow.Assignment
	hs.After = func(_ context.Context, c coordtest.Call, err error) error {
		if c.Method == "Children" && c.Path == store.Join(ns, "a", "workflow", "open") && started.Run == "" {
			var perr error
			if started, perr = s2.Pick(ctx, []int{2, 3}, nil, true, 4); perr != nil {
				t.Error(perr)
			}
		}
		return err
	}
	got, err := s1.Pick(ctx, []int{0, 1}, nil, true, 4)
	if err != nil {
		t.Fatal(err)
	}
	if started.Run != workflow.RunID("a", 2) {
		t.Fatalf("server 2 started %q, want %s", started.Run, workflow.RunID("a", 2))
	}
	if got.Run != started.Run {
		t.Fatalf("server 1 picked %+v while server 2 started %s: want it to serve %s", got, started.Run, started.Run)
	}
}

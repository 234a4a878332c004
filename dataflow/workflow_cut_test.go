package dataflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestWorkflowItemWhoseFenceFailedOnTheSessionRunsAgain: a's only item
// finds its commit refused by its fence because the server's connection
// was lost at that moment (Shard.CheckOwnership: ErrSessionLost), and
// its run ends with that error before the run's context is cancelled (the
// connection is back). The item was cut, not failed: it is not recorded
// in its workflow run, runs again there (the reconcile kick), and b, which
// depends on a, runs after it. Recorded as a failed item, it failed a's
// step and stopped b (the workflow simulation's seed 2 found it, with
// session expiries racing the runs).
func TestWorkflowItemWhoseFenceFailedOnTheSessionRunsAgain(t *testing.T) {
	srv := memstore.NewServer()
	ctx := t.Context()
	sess := srv.Connect()
	var mu sync.Mutex
	aRuns, bRuns := 0, 0
	var fenceErr error
	a := func(ctx context.Context, s Shard) error {
		mu.Lock()
		aRuns++
		first := aRuns == 1
		mu.Unlock()
		if !first {
			return s.CheckOwnership(ctx)
		}
		sess.Disconnect()
		err := s.CheckOwnership(ctx)
		sess.Reconnect()
		mu.Lock()
		fenceErr = err
		mu.Unlock()
		return fmt.Errorf("commit a's batch: %w", err)
	}
	b := func(context.Context, Shard) error {
		mu.Lock()
		bRuns++
		mu.Unlock()
		return nil
	}
	n, err := NewNode(NodeConfig{Store: sess, ServerID: "s0", Namespace: "cut", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct {
		cfg JobConfig
		fn  func(context.Context, Shard) error
	}{
		{JobConfig{JobName: "a"}, a},
		{JobConfig{JobName: "b", DependsOn: []string{"a"}}, b},
	} {
		j.cfg.ShardingTotalCount, j.cfg.ReconcileInterval = 1, time.Second
		if err := AddSimpleJob(ctx, n, j.cfg, j.fn); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	if err := n.TriggerLocal("a"); err != nil {
		t.Fatal(err)
	}
	run := workflow.RunID("a", 1)
	testwait.For(t, 30*time.Second, "b's step of "+run+" decided", func() bool {
		s, _, err := workflow.ReadStep(ctx, sess, "cut", "b", run)
		return err == nil && s.Decided()
	})
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(fenceErr, protocol.ErrSessionLost) {
		t.Fatalf("a's first fence: %v, want ErrSessionLost (the test's cut did not happen)", fenceErr)
	}
	for _, j := range []string{"a", "b"} {
		if s, _, err := workflow.ReadStep(ctx, sess, "cut", j, run); err != nil || s.State != workflow.StateSucceeded {
			t.Errorf("%s's step of %s: %+v, %v; want succeeded", j, run, s, err)
		}
	}
	if aRuns != 2 || bRuns != 1 {
		t.Errorf("a's item ran %d times, b's %d; want a's twice (cut, then complete) and b's once", aRuns, bRuns)
	}
}

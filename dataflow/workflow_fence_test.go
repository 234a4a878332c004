package dataflow

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestWorkflowItemCutAfterACommitRunsAgainBeforeTheNextStep: b's only
// item does its work in two commits, each fenced by Shard.CheckOwnership
// (a streaming item commits batch after batch), and its server's session
// closes after the first (a crash mid-item). The item is not complete in
// its workflow run: its next owner runs it again, finishing the second
// commit, and c, which depends on b, starts only after that. When the
// first fence recorded the item as committed in its workflow run, the next
// owner counted it completed: c started with b's second commit never made
// in that workflow run.
func TestWorkflowItemCutAfterACommitRunsAgainBeforeTheNextStep(t *testing.T) {
	srv := memstore.NewServer()
	ctx := t.Context()
	var mu sync.Mutex
	batches := map[string]int{}  // workflow run -> b's commits made (2 complete the item)
	cEntered := map[string]int{} // workflow run -> b's commits made when c's item entered
	cut := make(chan struct{})
	var cutOnce sync.Once
	b := func(ctx context.Context, s Shard) error {
		for {
			mu.Lock()
			done := batches[s.WorkflowRun]
			mu.Unlock()
			if done == 2 {
				return nil
			}
			if err := s.CheckOwnership(ctx); err != nil {
				return err
			}
			mu.Lock()
			batches[s.WorkflowRun]++
			mu.Unlock()
			if s.ServerID == "s0" {
				cutOnce.Do(func() { close(cut) })
				<-ctx.Done() // the session closes: the run is cancelled
				return ctx.Err()
			}
		}
	}
	c := func(ctx context.Context, s Shard) error {
		mu.Lock()
		defer mu.Unlock()
		cEntered[s.WorkflowRun] = batches[s.WorkflowRun]
		return nil
	}
	start := func(id string) (*Node, func() error) {
		sess := srv.Connect(memstore.WithSessionTimeout(time.Second))
		n, err := NewNode(NodeConfig{Store: sess, ServerID: id, Namespace: "fence", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		jobs := []struct {
			cfg JobConfig
			fn  func(context.Context, Shard) error
		}{
			{JobConfig{JobName: "a"}, func(context.Context, Shard) error { return nil }},
			{JobConfig{JobName: "b", DependsOn: []string{"a"}}, b},
			{JobConfig{JobName: "c", DependsOn: []string{"b"}}, c},
		}
		for _, j := range jobs {
			j.cfg.ShardingTotalCount, j.cfg.Failover = 1, true
			if err := AddSimpleJob(ctx, n, j.cfg, j.fn); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return n, sess.Close
	}
	n0, close0 := start("s0")
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = n0.StopAndCancel(sctx)
	}()
	if err := n0.TriggerLocal("a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
	case <-time.After(30 * time.Second):
		t.Fatal("b's item did not run on s0 in 30 s")
	}
	_ = close0()

	n1, _ := start("s1")
	defer stopNode(t, n1)
	run := workflow.RunID("a", 1)
	testwait.For(t, 30*time.Second, "c's step of "+run+" decided", func() bool {
		s, _, err := workflow.ReadStep(ctx, n1.Store(), "fence", "c", run)
		return err == nil && s.Decided()
	})
	mu.Lock()
	defer mu.Unlock()
	if batches[run] != 2 {
		t.Errorf("%s: b's item made %d of its 2 commits, want both", run, batches[run])
	}
	if got, ok := cEntered[run]; !ok || got != 2 {
		t.Errorf("%s: c's item entered (%v) with %d of b's 2 commits made, want after both", run, ok, got)
	}
}

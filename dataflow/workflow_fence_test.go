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

// TestWorkflowItemCommittedThenCutRunsOnce: b's only item commits its
// effect through Shard.CheckOwnership, and its server's session is then
// closed before the run records the item in its workflow run (a crash
// right after the commit). The item's next owner must count it completed
// in that workflow run, not run it again: its commit passed the fence,
// which recorded it (workflow.Steps.Fence). Before the fence recorded
// commits, the item ran again on the next server and committed twice.
func TestWorkflowItemCommittedThenCutRunsOnce(t *testing.T) {
	srv := memstore.NewServer()
	ctx := t.Context()
	var mu sync.Mutex
	commits := map[string]int{} // server|run -> commits of b's item
	cut := make(chan struct{})
	var cutOnce sync.Once
	b := func(ctx context.Context, s Shard) error {
		if err := s.CheckOwnership(ctx); err != nil {
			return err
		}
		mu.Lock()
		commits[s.WorkflowRun]++
		mu.Unlock()
		if s.ServerID == "s0" {
			cutOnce.Do(func() { close(cut) })
			<-ctx.Done() // the session closes: the run is cancelled
		}
		return nil
	}
	start := func(id string) (*Node, func() error) {
		sess := srv.Connect(memstore.WithSessionTimeout(time.Second))
		n, err := NewNode(NodeConfig{Store: sess, ServerID: id, Namespace: "fence", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []JobConfig{{JobName: "a"}, {JobName: "b", DependsOn: []string{"a"}}} {
			cfg.ShardingTotalCount, cfg.Failover = 1, true
			fn := func(context.Context, Shard) error { return nil }
			if cfg.JobName == "b" {
				fn = b
			}
			if err := AddSimpleJob(ctx, n, cfg, fn); err != nil {
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
	testwait.For(t, 30*time.Second, "b's step of "+run+" decided", func() bool {
		s, _, err := workflow.ReadStep(ctx, n1.Store(), "fence", "b", run)
		return err == nil && s.Decided()
	})
	mu.Lock()
	defer mu.Unlock()
	if commits[run] != 1 {
		t.Fatalf("%s: b's item committed %d times, want once", run, commits[run])
	}
}

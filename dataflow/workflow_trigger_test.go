package dataflow

import (
	"context"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

// triggerRuns sends the RunInfo of each trigger run of the job.
type triggerRuns chan RunInfo

func (triggerRuns) BeforeRun(context.Context, RunInfo) {}
func (c triggerRuns) AfterRun(_ context.Context, info RunInfo, _ RunResult) {
	if info.Reason == ReasonTrigger {
		c <- info
	}
}

// TestWorkflowLateTriggerStartsNoRun: a trigger of the first job is
// written for two servers; s1 dies before it takes its trigger, and s0's
// fire starts workflow run 1 and runs it whole (s1's items came to it).
// s1 restarts under its id and takes its trigger, written before run 1
// started: that fire was answered by run 1 and must start no workflow run
// (it started run 2 before, with s1's items only, which then waited for
// the others' reconcile kick; TestWorkflowDiamondSurvivesKills' victim
// restarted with its trigger of the kill's workflow run pending).
func TestWorkflowLateTriggerStartsNoRun(t *testing.T) {
	srv := memstore.NewServer()
	ctx := t.Context()
	const ns = "late"
	start := func(id string, l triggerRuns) (*Node, store.Store) {
		sess := srv.Connect(memstore.WithSessionTimeout(time.Second))
		n, err := NewNode(NodeConfig{Store: sess, ServerID: id, Namespace: ns, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []JobConfig{{JobName: "a"}, {JobName: "b", DependsOn: []string{"a"}}} {
			cfg.ShardingTotalCount = 2
			var opts []JobOption
			if cfg.JobName == "a" && l != nil {
				opts = append(opts, WithListeners(l))
			}
			if err := AddSimpleJob(ctx, n, cfg, func(context.Context, Shard) error { return nil }, opts...); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return n, sess
	}
	n0, _ := start("s0", nil)
	defer stopNode(t, n0)
	n1, sess1 := start("s1", nil)
	// s1 dies with the trigger written for it, not taken.
	_ = sess1.Close()
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = n1.StopAndCancel(sctx)
	}()
	if _, err := n0.Store().Create(ctx, store.Join("/"+ns, "a", "servers", "s1", "trigger"), nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if err := n0.TriggerAll(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	run := workflow.RunID("a", 1)
	decided := func(job string) func() bool {
		return func() bool {
			s, _, err := workflow.ReadStep(ctx, n0.Store(), ns, job, run)
			return err == nil && s.Decided()
		}
	}
	testwait.For(t, 30*time.Second, "b's step of "+run+" decided", decided("b"))

	runs := make(triggerRuns, 16)
	n1, _ = start("s1", runs)
	defer stopNode(t, n1)
	select {
	case info := <-runs:
		if info.WorkflowRun != "" {
			t.Fatalf("s1's late trigger ran %v in workflow run %s, want nothing", info.Items, info.WorkflowRun)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("s1 took no trigger in 30 s")
	}
	data, _, err := n0.Store().Get(ctx, store.Join("/"+ns, "a", "workflow", "seq"))
	if err != nil || string(data) != "1" {
		t.Fatalf("a's workflow run counter is %q (%v) after s1's late trigger, want 1", data, err)
	}
}

// TestWorkflowStepItemsMovedByReshardRunPromptly: s1 dies (its session
// closed) while its item of b's running step runs; the reshard gives the
// item to s0, which has run its own item of the step already (its trigger
// taken). s0 runs the moved item in the same workflow run at once (the
// reshard wakes it: protocol.SignalResharded), not at its next reconcile
// tick a minute later (failover is off, so no claim runs it either).
func TestWorkflowStepItemsMovedByReshardRunPromptly(t *testing.T) {
	srv := memstore.NewServer()
	ctx := t.Context()
	const ns = "moved"
	entered := make(chan string, 16)
	b := func(ctx context.Context, s Shard) error {
		entered <- s.ServerID
		if s.ServerID == "s1" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	start := func(id string) (*Node, store.Store) {
		sess := srv.Connect(memstore.WithSessionTimeout(time.Second))
		n, err := NewNode(NodeConfig{Store: sess, ServerID: id, Namespace: ns, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []JobConfig{{JobName: "a"}, {JobName: "b", DependsOn: []string{"a"}}} {
			cfg.ShardingTotalCount = 2
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
		return n, sess
	}
	n0, _ := start("s0")
	defer stopNode(t, n0)
	n1, sess1 := start("s1")
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = n1.StopAndCancel(sctx)
	}()
	if err := n0.TriggerAll(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for seen := map[string]bool{}; !seen["s0"] || !seen["s1"]; {
		select {
		case id := <-entered:
			seen[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("b's items entered on %v only in 30 s", seen)
		}
	}
	_ = sess1.Close()
	run := workflow.RunID("a", 1)
	testwait.For(t, 20*time.Second, "b's step of "+run+" decided", func() bool {
		s, _, err := workflow.ReadStep(ctx, n0.Store(), ns, "b", run)
		return err == nil && s.Decided()
	})
}

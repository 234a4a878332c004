package protocol_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
)

// A run whose assignment a reshard replaced while it runs must stop
// streaming (KeepGoing false): every commit of it is fenced, and it would
// otherwise fetch and fail the same rows for as long as the flag stays
// down. With monitorExecution off the leader reshards without waiting for
// runs, so this is the normal case there: a join here. In a synctest bubble.
func TestRunOnReplacedAssignmentStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2, func(c *jobconfig.Config) { c.DisableMonitorExecution = true })
		leader := h.Start("a", cfg)
		run := coordtest.BeginAll(t, leader)[0] // the join's reshard: both items
		synctest.Wait()
		if !run.KeepGoing() {
			t.Fatal("KeepGoing is false before anything changed")
		}
		h.Start("b", cfg) // the leader's watcher reshards at once
		synctest.Wait()
		if err := run.CheckOwnership(context.Background(), run.Shards()[0].Item); err == nil {
			t.Fatal("the leader did not reshard on the join")
		}
		if run.KeepGoing() {
			t.Fatalf("KeepGoing is true for a run on items %+v whose assignment was replaced (fenced for good, it would stream for ever)", run.Shards())
		}
		coordtest.CompleteAll(t, run)
	})
}

// The leader's own Begin has found no resharding flag and read its
// assignment (both items); before it marks them running, a server joins
// and the leader's watcher starts resharding: it finds no item running and
// is held before its transaction. The Begin's transaction must not go
// through then: the reshard, which has already scanned for running items,
// would move the items under the run (a run on a replaced assignment, every
// commit fenced; its running nodes keep the new owner's Begins out as
// misfires). The Begin waits for the reshard and runs its new share. In the
// pgbatch test TestWorkRecordsHistoryTotals (one make test in 16 last
// session) both workers sat silent for 120 s this way: the stale run
// streamed fenced batches for ever. In a synctest bubble.
func TestBeginBesideReshardOnJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2)
		// afterMulti, armed inside the Begin's transaction, runs once that
		// transaction has returned.
		var (
			mu         sync.Mutex
			afterMulti func()
		)
		hs := &coordtest.HookStore{Store: h.B.Connect(t), After: func(_ context.Context, c coordtest.Call, err error) error {
			mu.Lock()
			f := afterMulti
			if c.Method == "Multi" {
				afterMulti = nil
			}
			mu.Unlock()
			if f != nil && c.Method == "Multi" {
				f()
			}
			return err
		}}
		total := "/" + h.NS + "/job/config/" + jobconfig.FieldShardingTotalCount
		leader, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader)...) // the join's reshard
		synctest.Wait()

		release := make(chan struct{})
		resharding := make(chan struct{})
		var joiner *coordtest.Server
		hs.OnNext("Multi", "", func() {
			mu.Lock()
			afterMulti = func() { close(release) }
			mu.Unlock()
			// The reshard is held at its read of the total, after its
			// scan for running items and its read of the membership.
			hs.OnNext("Get", total, func() {
				close(resharding)
				<-release
			})
			joiner = h.Start("b", cfg)
			synctest.Wait()
			select {
			case <-resharding:
			default:
				t.Error("the leader's watcher did not start resharding after the join")
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		type result struct {
			run *protocol.Run
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := leader.Job.Begin(ctx, time.Now())
			done <- result{r, err}
		}()
		res := <-done
		if res.err != nil {
			t.Fatalf("leader's Begin: %v", res.err)
		}
		run := res.run
		synctest.Wait()
		for _, a := range run.Shards() {
			if err := run.CheckOwnership(ctx, a.Item); err != nil {
				t.Errorf("the run began on items %+v, and the reshard moved them while it runs: %v", run.Shards(), err)
				break
			}
		}
		jrun, err := joiner.Job.Begin(ctx, time.Now())
		if err != nil {
			coordtest.CompleteAll(t, run)
			t.Fatalf("joiner's Begin: %v", err)
		}
		coordtest.AssertPartition(t, 2, run, jrun)
		coordtest.CompleteAll(t, run, jrun)
	})
}

package coord_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
)

// A run that began on the assignment a reshard then replaced must stop
// streaming (KeepGoing false): its every commit is fenced, and its running
// nodes keep the new owners' Begins out (ErrItemsRunning, a misfire) for as
// long as it streams. Here the leader's watcher reshards on a join in the
// window between its scan for running items and its transaction, and the
// leader's own Begin marks its items running in that window. In a pgbatch
// test (examples/pgbatch TestWorkRecordsHistoryTotals, one make test in
// 16) the two workers then sat silent for 120 s: the stale run streamed
// fenced batches for ever, the reshard's flag gone, and the joiner's Begins
// were skipped as misfires. In a synctest bubble.
func TestRunOnReplacedAssignmentStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2)
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		servers := "/" + h.NS + "/job/servers"
		leader, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader)...) // the join's reshard
		synctest.Wait()

		release := make(chan struct{})
		resharding := make(chan struct{})
		var joiner *coordtest.Server
		// The leader's Begin has read its assignment (both items) and is
		// about to mark them running: a server joins, and the leader's
		// watcher, finding no item running, starts resharding; it is held
		// at its read of the membership, after its scan for running items.
		hs.OnNext("Multi", "", func() {
			hs.OnNext("Get", servers, func() {
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
		run, err := leader.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("leader's Begin: %v", err)
		}
		close(release) // the reshard commits
		synctest.Wait()
		if t.Failed() {
			return
		}
		for _, a := range run.Shards() {
			if err := run.CheckOwnership(ctx, a.Item); err == nil {
				t.Logf("item %d still owned with epoch %d (the reshard waited for the run)", a.Item, a.Epoch)
			}
		}
		if run.KeepGoing() {
			t.Fatalf("KeepGoing is true for a run on items %+v whose assignment was replaced (fenced for good, it would stream for ever)", run.Shards())
		}
		coordtest.CompleteAll(t, run)
		// With the stale run over, the joiner runs its item.
		jrun, err := joiner.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("joiner's Begin: %v", err)
		}
		defer coordtest.CompleteAll(t, jrun)
		if len(jrun.Shards()) != 1 {
			t.Fatalf("joiner's run has items %+v, want one of the two", jrun.Shards())
		}
	})
}

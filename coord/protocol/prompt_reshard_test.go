package protocol_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// The leader's prompt resharding (its watcher's, when a join raises the
// flag and no item runs) fails because the connection drops midway, and
// the same session then resumes. The leader has no trigger of its own, so
// nothing but its watcher reshards: the others' Begins must not wait for
// the leader's next trigger. (ZooKeeper simulation seed 800010: four Begins
// waited more than 10 s, until the leader's next trigger resharded.) In a
// synctest bubble: before the fix the Begin waits out its 10 s bound.
func TestPromptReshardAfterResumedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2)
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		total := "/" + h.NS + "/job/config/" + jobconfig.FieldShardingTotalCount
		leader, err := h.TryStart("server-0", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader)...) // the join's reshard
		synctest.Wait()
		// The next reshard's read of the total (after its reads of the
		// live markers and the membership) finds the connection gone.
		cut := make(chan struct{})
		hs.OnNext("Get", total, func() {
			h.B.Disconnect(t, hs.Store)
			close(cut)
		})
		joiner := h.Start("server-1", cfg)
		synctest.Wait()
		select {
		case <-cut:
		default:
			t.Fatal("the leader's watcher did not start resharding after the join")
		}
		if sess, _ := hs.Session(); sess.State != store.StateSuspended {
			t.Fatalf("leader session %v, want suspended", sess.State)
		}
		h.B.Reconnect(t, hs.Store)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		run, err := joiner.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("joiner's Begin: %v (the leader never resharded after its session resumed)", err)
		}
		coordtest.CompleteAll(t, run)
		if len(run.Shards()) != 1 {
			t.Fatalf("joiner's run has items %+v, want one of the two", run.Shards())
		}
	})
}

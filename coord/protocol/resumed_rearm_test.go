package protocol_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// cutOnNext arms hs to cut its connection (the same session stays, as on a
// network cut shorter than the session timeout) at the next call of method
// on path, before the call reaches the store: the call fails with a lost
// connection. The returned channel is closed once the cut is made.
func cutOnNext(t *testing.T, h *coordtest.Harness, hs *coordtest.HookStore, method, path string) <-chan struct{} {
	cut := make(chan struct{})
	hs.OnNext(method, path, func() {
		h.B.Disconnect(t, hs.Store)
		close(cut)
	})
	return cut
}

// resumeAfterCut checks that cut was made, that hs's session is suspended
// (not lost), and reconnects it: the same session resumes.
func resumeAfterCut(t *testing.T, h *coordtest.Harness, hs *coordtest.HookStore, cut <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-cut:
	default:
		t.Fatalf("the watcher did not re-read %s after its watch fired", what)
	}
	before, _ := hs.Session()
	if before.State != store.StateSuspended {
		t.Fatalf("session %v after the cut, want suspended", before.State)
	}
	h.B.Reconnect(t, hs.Store)
	if after, _ := hs.Session(); after.State != store.StateConnected || after.ID != before.ID {
		t.Fatalf("session 0x%x %v after the reconnect, want 0x%x connected (resumed)", after.ID, after.State, before.ID)
	}
}

// A config edit's watch fires, and the watcher's re-read of the config
// (which re-arms the watch) fails on a cut connection; more edits come while
// the server is cut off, and the same session then resumes. Nothing armed a
// watch on the config, so no held-back event tells the cache: the resumed
// session must reload what failed to re-arm as promptly as it delivers the
// events of the watches it kept. (ZooKeeper simulation seed 993076: the
// server ran the quiet phase's four triggers, 115 ms after the resume, on
// the config from before the edits; the resync came with the watcher's retry,
// 200 ms after.) In a synctest bubble no time passes between the resume and
// the Begin: before the fix the Begin runs on the old config.
func TestConfigEditsAfterAFailedReArmOnAResumedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		s, err := h.TryStart("server-0", coordtest.Config("job", 3), hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
		synctest.Wait()

		ctx := context.Background()
		const cron = "0 30 9 ? * 2#1"
		cut := cutOnNext(t, h, hs, "GetW", "/"+h.NS+"/job/config")
		if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldCron, cron); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// While cut off: no watch on the config, nothing held back.
		if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldShardingTotalCount, "1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		resumeAfterCut(t, h, hs, cut, "the config")
		synctest.Wait()

		runs := coordtest.BeginAll(t, s)
		defer coordtest.CompleteAll(t, runs...)
		if got := runs[0].Config(); got.Cron != cron || got.ShardingTotalCount != 1 {
			t.Fatalf("the run after the resume carries cron %q and total %d, want %q and 1 (the edits its cache missed)", got.Cron, got.ShardingTotalCount, cron)
		}
	})
}

// The same with the resharding flag, on a paused leader (ZooKeeper
// simulation seed 991089): the flag's watch (the children of
// leader/sharding) fires, its re-read fails on a cut connection, and the
// same session resumes. A paused leader runs nothing, and its reshard (its
// watcher's, or its paused Begin's) starts from its cache's view of the
// flag: the flag stayed up through the quiet phase's triggers, every other
// server's Begin waiting for it. Before the fix the flag is still up after
// the resume.
func TestReshardingFlagAfterAFailedReArmOnAResumedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		leader, err := h.TryStart("server-0", coordtest.Config("job", 3), hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader)...)
		ctx := context.Background()
		if err := h.Admin.Pause(ctx, "job", "server-0"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		// An edit of the total raises the flag (in its transaction); the
		// leader's re-read of the flag's directory finds the connection cut.
		dir := "/" + h.NS + "/job/leader/sharding"
		cut := cutOnNext(t, h, hs, "ChildrenW", dir)
		if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldShardingTotalCount, "2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		resumeAfterCut(t, h, hs, cut, "the resharding flag")
		synctest.Wait()

		if up, _, err := h.AdminStore.Exists(ctx, dir+"/necessary"); err != nil || up {
			t.Fatalf("resharding flag up=%v (err %v) after the paused leader's session resumed, want down", up, err)
		}
		_, err = leader.Job.Begin(ctx, time.Now())
		if !errors.Is(err, protocol.ErrPaused) {
			t.Fatalf("paused leader's Begin: %v, want ErrPaused", err)
		}
	})
}

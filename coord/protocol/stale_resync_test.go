package protocol_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// A new session's re-registration resyncs the tree cache, then fails
// further on (its election's read finds the connection cut), so its step
// ends with the retry owed. A config edit's watch, armed by that resync,
// fired just before the cut; its re-read fails on the cut connection, so
// the config is not watched any more and the cache owes a resync. The
// resync the re-registration made came before that failure and covers none
// of it: when the same session resumes, the cache must load the config
// again. (Postgres simulation seed 3600166: after two expiries, a server
// ran the quiet phase's triggers on the config from before an edit of the
// total, for good; the suspension's session event took the earlier resync
// for the one owed.) Before the fix the Begin after the resume runs on the
// old total.
func TestConfigEditAfterAReRegistrationFailedPastItsResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		s, err := h.TryStart("server-0", coordtest.Config("job", 3), hs)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// A first edit, as in the schedule: the job's audit log exists
		// before the one under test (its creation would fire the job
		// node's own watch).
		if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldMisfire, "false"); err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
		synctest.Wait()

		// The re-registration's election reads the latch after the resync:
		// the edit lands then (its watch fires, queued behind the step),
		// and the connection is cut before the read.
		edited := make(chan struct{})
		hs.OnNext("Children", "/"+h.NS+"/job/leader/election/latch", func() {
			if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldShardingTotalCount, "1"); err != nil {
				t.Error(err)
			}
			h.B.Disconnect(t, hs.Store)
			close(edited)
		})
		before, _ := hs.Session()
		h.B.Expire(t, hs.Store)
		synctest.Wait()
		select {
		case <-edited:
		default:
			t.Fatal("the re-registration on the new session did not run its election")
		}
		cut, _ := hs.Session()
		if cut.ID == before.ID {
			t.Fatalf("session 0x%x after the expiry, want a new one", cut.ID)
		}
		h.B.Reconnect(t, hs.Store)
		if after, _ := hs.Session(); after.ID != cut.ID {
			t.Fatalf("session 0x%x after the reconnect, want 0x%x resumed", after.ID, cut.ID)
		}
		synctest.Wait()

		runs := coordtest.BeginAll(t, s)
		defer coordtest.CompleteAll(t, runs...)
		if got := runs[0].Config().ShardingTotalCount; got != 1 {
			t.Fatalf("the run after the resume carries total %d, want 1 (the edit whose re-read failed after the re-registration's resync)", got)
		}
	})
}

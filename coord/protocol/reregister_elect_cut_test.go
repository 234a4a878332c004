package protocol_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// A server whose session expired re-registers on the new one; the
// connection drops under that re-registration's election, and the same
// (new) session then resumes. The election that failed must run again on
// the resumed session: it keeps nothing that would (no candidate stands,
// no watch is armed), and before the fix the watcher, finding itself
// registered on the resumed session, ran nothing. The job was left with no
// leader and its resharding flag up for good (ZooKeeper simulation seed
// 1600278). In a synctest bubble.
func TestReRegistrationElectionCutByADisconnectRunsAgainOnResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := coordtest.NewHarness(t, coordtest.Mem())
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		s, err := h.TryStart("s", coordtest.Config("job", 3), hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
		synctest.Wait()

		// The re-registration on the new session lists the latch first
		// (adopting a candidate its session may have): cut the connection
		// there, so that the election fails on a lost connection.
		latch := "/" + h.NS + "/job/leader/election/latch"
		cut := cutOnNext(t, h, hs, "Children", latch)
		h.B.Expire(t, hs.Store)
		synctest.Wait()
		resumeAfterCut(t, h, hs, cut, "the election's latch")
		// Past the watcher's retries on the resumed session.
		time.Sleep(2 * time.Second)
		synctest.Wait()

		host := "/" + h.NS + "/job/leader/election/host"
		data, _, err := h.AdminStore.Get(ctx, host)
		if err != nil || string(data) != "s" {
			t.Fatalf("election host = %q (err %v) after the re-registration's election was cut and the session resumed, want s leading", data, err)
		}
		if sess, _ := hs.Session(); sess.State != store.StateConnected {
			t.Fatalf("session %v at the end, want connected", sess.State)
		}
		// The leader reshards at its next Begin when its watcher has not
		// already (the flag may stay up until a trigger): after it, the
		// flag is down.
		coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
		if up, _, err := h.AdminStore.Exists(ctx, "/"+h.NS+"/job/leader/sharding/necessary"); err != nil || up {
			t.Fatalf("resharding flag up=%v (err %v) after the leader's Begin, want down (resharded by the leader)", up, err)
		}
	})
}

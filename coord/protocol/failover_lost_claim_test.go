package protocol_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// A server killed mid failover run loses its claim with its session, and
// a failover run writes no run record: before claim records, nothing told
// the leader, and the item ran again only at its owner's next normal
// Begin, which a busy owner starts after its current run (issue 15: 4 of
// 50 busy kills of bench-failover took 3.06-4.03 s). The leader's scan
// now finds the claim's record without its claim and queues the item
// again at once: another server claims and runs it while the owner's long
// normal run still goes on, with a higher epoch than the lost claim's. In
// a synctest bubble.
func TestLostFailoverClaimQueuedAgainWhileOwnerBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lostClaimWhileOwnerBusy(t, func(h *coordtest.Harness, claimant *coordtest.Server) { h.B.Kill(t, claimant.St) })
	})
}

// The same when the claimant's session expires and it registers again on a
// new session at once: its claim went with the old session, its status
// node comes back. In a synctest bubble.
func TestExpiredFailoverClaimQueuedAgainWhileOwnerBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lostClaimWhileOwnerBusy(t, func(h *coordtest.Harness, claimant *coordtest.Server) { h.B.Expire(t, claimant.St) })
	})
}

// lostClaimWhileOwnerBusy has a claimant lose its claim mid failover run
// (lose) while the item's owner is in a long normal run, and checks that
// the item is queued again and run by another server before the owner's
// run ends. In a synctest bubble.
func lostClaimWhileOwnerBusy(t *testing.T, lose func(*coordtest.Harness, *coordtest.Server)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := coordtest.NewHarness(t, coordtest.Mem())
	cfg := coordtest.Config("job", 4, func(c *jobconfig.Config) { c.Failover = true })
	byID := map[string]*coordtest.Server{}
	var survivors []*coordtest.Server
	for _, id := range []string{"l", "a", "b"} {
		byID[id] = h.Start(id, cfg)
		survivors = append(survivors, byID[id])
	}
	v := h.Start("v", cfg)
	runs := coordtest.BeginAll(t, append(slices.Clone(survivors), v)...)
	parts := coordtest.AssertPartition(t, 4, runs...)
	coordtest.CompleteAll(t, runs[:3]...)
	h.B.Kill(t, v.St)
	item := parts[3][0]
	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's item queued", func(q testsignal.Queued) bool {
		return slices.Equal(q.Items, parts[3])
	})
	// The leader reshards at once (nothing runs): v's item gets an
	// owner among the survivors.
	var owner *coordtest.Server
	coordtest.Eventually(t, "v's item resharded to a survivor", func() bool {
		st, err := h.Admin.Status(ctx, "job")
		if err != nil || st.ReshardingPending {
			return false
		}
		for _, ss := range st.Servers {
			if ss.ID != "v" && slices.Contains(ss.Sharding, item) {
				owner = byID[ss.ID]
				return true
			}
		}
		return false
	})
	var others []*coordtest.Server
	for _, s := range survivors {
		if s != owner {
			others = append(others, s)
		}
	}
	claimant, next := others[0], others[1]
	synctest.Wait() // the claimant's cache has seen the queued item

	// The claimant claims v's item and begins its failover run.
	if ok, err := claimant.Job.ClaimFailover(ctx); err != nil || !ok {
		t.Fatalf("%s's ClaimFailover = %v, %v; want v's item claimed", claimant.ID, ok, err)
	}
	frun, err := claimant.Job.Begin(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if sh := frun.Shards(); len(sh) != 1 || sh[0].Item != item || !sh[0].Failover {
		t.Fatalf("%s's run = %+v, want the failover run of item %d", claimant.ID, sh, item)
	}
	lostEpoch := frun.Shards()[0].Epoch

	// The owner begins a long normal run: the claimed item is not in it.
	long, err := owner.Job.Begin(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(long.Shards(), func(a protocol.Assignment) bool { return a.Item == item }) {
		t.Fatalf("owner %s's run %+v holds item %d, claimed by %s", owner.ID, long.Shards(), item, claimant.ID)
	}

	// The claimant loses its claim mid failover run.
	lose(h, claimant)
	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "the lost claim's item queued again", func(q testsignal.Queued) bool {
		return slices.Contains(q.Items, item)
	})
	synctest.Wait() // the next server's cache has seen the queue
	st, err := h.Admin.Status(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.FailoverQueue, item) {
		t.Fatalf("failover queue %v, want item %d queued again", st.FailoverQueue, item)
	}

	// Another server claims and runs it, the owner's run still open.
	if ok, err := next.Job.ClaimFailover(ctx); err != nil || !ok {
		t.Fatalf("%s's ClaimFailover = %v, %v; want item %d claimed again", next.ID, ok, err, item)
	}
	again, err := next.Job.Begin(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sh := again.Shards()
	if len(sh) != 1 || sh[0].Item != item || !sh[0].Failover {
		t.Fatalf("%s's run = %+v, want the failover run of item %d", next.ID, sh, item)
	}
	if sh[0].Epoch <= lostEpoch {
		t.Errorf("new failover run's epoch %d, want above the lost claim's %d", sh[0].Epoch, lostEpoch)
	}
	if err := again.CheckOwnership(ctx, item); err != nil {
		t.Errorf("new failover run's CheckOwnership: %v", err)
	}
	coordtest.CompleteAll(t, again)
	coordtest.CompleteAll(t, long)

	// Done once: nothing queued, no claim record left behind.
	synctest.Wait()
	if st, err = h.Admin.Status(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if len(st.FailoverQueue) != 0 {
		t.Errorf("failover queue %v after the failover run, want empty", st.FailoverQueue)
	}
	for _, is := range st.Items {
		if is.Failover != "" || is.FailoverLost != "" {
			t.Errorf("item %d: failover %q, lost %q after the failover run completed; want none", is.Item, is.Failover, is.FailoverLost)
		}
	}
}

// A server that leaves gracefully gives back the failover claims no run of
// it has taken: held, they would keep their items from every server until
// its session ends (and a Leave does not end it). In a synctest bubble.
func TestLeaveGivesBackFailoverClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		l, a, items := crashMidRun(t, h, 3)
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || !ok {
			t.Fatalf("a's ClaimFailover = %v, %v; want v's item claimed", ok, err)
		}
		if err := a.Job.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // l's watcher has seen the queue
		defer coordtest.CompleteAll(t, runGivenBack(ctx, t, l, items[0]))
	})
}

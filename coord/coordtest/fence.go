package coordtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// fenceHolds fails the test unless a transaction of the admin's session
// made of r's Fence commits: the run owns its items.
func fenceHolds(t *testing.T, h *Harness, r *protocol.Run, what string) {
	t.Helper()
	f := r.Fence()
	if len(f) == 0 {
		t.Fatalf("%s: the run's Fence is empty", what)
	}
	if _, err := h.AdminStore.Multi(testCtx(t), f...); err != nil {
		t.Fatalf("%s: the run's Fence fails: %v", what, err)
	}
}

// fenceRefused fails the test unless r's Fence fails a transaction, on one
// of its own checks.
func fenceRefused(t *testing.T, h *Harness, r *protocol.Run, what string) {
	t.Helper()
	f := r.Fence()
	_, err := h.AdminStore.Multi(testCtx(t), f...)
	var me *store.MultiError
	if !errors.As(err, &me) || me.Index >= len(f) || !errors.Is(err, store.ErrBadVersion) && !errors.Is(err, store.ErrNoNode) {
		t.Fatalf("%s: the run's Fence gave %v; want a check of it refused", what, err)
	}
}

// testRunFenceNormal: a normal run's Fence holds while the run owns its
// items, and fails once its server's session ended, also after the server
// began a run again on its new session (a new live marker, its run record
// written again): the old run's workflow record must not commit then.
func testRunFenceNormal(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	r1 := BeginAll(t, a)[0]
	fenceHolds(t, h, r1, "a run just begun")
	h.B.Expire(t, a.St)
	select {
	case <-r1.Context().Done():
	case <-time.After(signalWait):
		t.Fatal("run context not cancelled on session expiry")
	}
	fenceRefused(t, h, r1, "the run after its session expired")
	_ = r1.Complete(testCtx(t), time.Time{}) // refused: its session is gone
	var r2 *protocol.Run
	Eventually(t, "a begins a run on its new session", func() bool {
		r, err := a.Job.Begin(testCtx(t), time.Now())
		if err != nil || len(r.Shards()) == 0 {
			if err == nil {
				CompleteAll(t, r)
			}
			return false
		}
		r2 = r
		return true
	})
	defer CompleteAll(t, r2)
	fenceHolds(t, h, r2, "the run on the new session")
	fenceRefused(t, h, r1, "the old run, after a run began on the new session")
}

// testRunFenceFailover: a failover run's Fence holds while its claim
// lives, and fails once its claimer's session ended, also after another
// server claimed the item again and began its failover run of it (the
// same claim node created again): the cut run's workflow record must not
// commit while the new failover run may still commit. One item a server,
// so that each claim is of the crashed server's one item.
func testRunFenceFailover(t *testing.T, h *Harness) {
	const n = 4
	l := h.Start("l", Config("job", n, withFailover)) // leader
	a := h.Start("a", Config("job", n, withFailover))
	c := h.Start("c", Config("job", n, withFailover))
	b := h.Start("b", Config("job", n, withFailover))
	runs := BeginAll(t, l, a, c, b)
	parts := AssertPartition(t, n, runs...)
	for _, r := range runs {
		fenceHolds(t, h, r, "a normal run just begun")
	}
	CompleteAll(t, runs[0], runs[2], runs[3]) // a crashes mid-run
	h.B.Kill(t, a.St)
	h.Signals.FailoverQueued.Wait(t, signalWait, "a's unfinished items queued for failover", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, parts[1])
	})
	fenceRefused(t, h, runs[1], "a's run after its session ended")
	f1 := claimAndBegin(t, c)
	if sh := f1.Shards(); len(sh) != 1 || !sh[0].Failover {
		t.Fatalf("c's failover run shards = %+v, want a's item as failover", sh)
	}
	fenceHolds(t, h, f1, "c's failover run")
	item := f1.Shards()[0].Item

	// c's session ends mid-run: its claim is lost, the leader queues the
	// item again, and b claims it and begins its failover run.
	h.B.Kill(t, c.St)
	fenceRefused(t, h, f1, "c's failover run after its session ended")
	h.Signals.FailoverQueued.Wait(t, signalWait, "c's lost claim queued again", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, []int{item})
	})
	// b's failover signal of a's crash may be the one still pending: it
	// claims once its view has the entry queued again.
	Eventually(t, "b claims the item queued again", func() bool {
		ok, err := b.Job.ClaimFailover(testCtx(t))
		if err != nil {
			t.Fatalf("ClaimFailover on b: %v", err)
		}
		return ok
	})
	f2, err := b.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer CompleteAll(t, f2)
	if sh := f2.Shards(); len(sh) != 1 || !sh[0].Failover || sh[0].Item != item {
		t.Fatalf("b's failover run shards = %+v, want item %d as failover", sh, item)
	}
	fenceHolds(t, h, f2, "b's failover run")
	fenceRefused(t, h, f1, "c's cut failover run, after b's failover run of its item began")
}

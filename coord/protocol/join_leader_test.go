package protocol_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// A stored job's join that finds no candidate in the latch takes the
// leadership in its registration transaction (the host node beside its
// candidate). Here a second server joins between that join's read of the
// latch and its transaction, and takes the leadership first the same way:
// the first join's transaction then fails on the host node and plans
// again as an ordinary candidate. Exactly one leads, the two split the
// items, and when the leader leaves the other takes over. In a synctest
// bubble.
func TestStoredJoinTakesTheLeadershipInItsTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 4)
		first := h.Start("setup", cfg) // the job is stored; nobody stands after this
		coordtest.CompleteAll(t, coordtest.BeginAll(t, first)...)
		first.Stop(t)
		synctest.Wait()

		host := "/" + h.NS + "/job/leader/election/host"
		// a's transactions with the host node refused: on b's host node,
		// or on the membership version b's registration bumped (a's plan
		// reshards too: it stood alone when it read).
		var lost atomic.Int32
		hs := &coordtest.HookStore{Store: h.B.Connect(t), After: func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method == "Multi" && (errors.Is(err, store.ErrNodeExists) || errors.Is(err, store.ErrBadVersion)) && slices.ContainsFunc(c.Ops, func(op store.Op) bool {
				cr, ok := op.(*store.CreateOp)
				return ok && cr.Path == host
			}) {
				lost.Add(1)
			}
			return err
		}}
		var b *coordtest.Server
		hs.OnNext("Multi", "", func() { // a's registration transaction
			b = h.Start("b", cfg)
			synctest.Wait()
		})
		a, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatalf("a's join, raced by b's: %v", err)
		}
		synctest.Wait()
		if n := lost.Load(); n != 1 {
			t.Fatalf("a's registration transactions with the host node refused: %d, want 1 (b's join)", n)
		}
		st := h.Status(t, "job")
		if st.Leader != "b" {
			t.Fatalf("leader %q, want b (its transaction took the host node first)", st.Leader)
		}
		runs := coordtest.BeginAll(t, a, b)
		coordtest.AssertPartition(t, 4, runs...)
		coordtest.CompleteAll(t, runs...)

		b.Stop(t)
		h.Signals.Elected.Wait(t, 10*time.Second, "a elected after b left", func(e testsignal.Event) bool {
			return e.Server == "a" && e.Job == "job"
		})
		runs = coordtest.BeginAll(t, a)
		if got := len(runs[0].Shards()); got != 4 {
			t.Fatalf("a alone runs %d items, want 4", got)
		}
		coordtest.CompleteAll(t, runs...)
		if st := h.Status(t, "job"); st.Leader != "a" || !slices.Equal(coordtest.ItemNumbers(st), []int{0, 1, 2, 3}) {
			t.Fatalf("after b left: leader %q, items %v; want a and 0..3", st.Leader, coordtest.ItemNumbers(st))
		}
	})
}

package protocol_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
)

// A participant cut off while it waits times out and owes the withdrawal
// of its registrations to its session. When the session resumes, the
// job's watcher pays it, item after item; the next Once on that session
// (the next trigger's) must not register while that payment is under way:
// a registration it made, or took over (a node of its own server and
// session), before the watcher's delete of the item came would be deleted
// under it, and the set would wait for that item for good (every
// participant timing out). Here the watcher is held between its two
// deletes while a's next Once registers; before the fix that Once took
// the old registration of a's second item as its own, the watcher then
// deleted it, and no callback ran.
func TestOnceWaitsForTheWithdrawalItsSessionOwes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		a, err := h.TryStart("a", coordtest.Config("job", 4), hs)
		if err != nil {
			t.Fatal(err)
		}
		b := h.Start("b", coordtest.Config("job", 4))
		runs := coordtest.BeginAll(t, a, b)
		defer coordtest.CompleteAll(t, runs...)
		ra, rb := runs[0], runs[1]
		if len(ra.Shards()) < 2 {
			t.Fatalf("a runs %v, want two items", ra.Shards())
		}
		ctx := context.Background()
		var ran atomic.Int32
		callback := func(context.Context) error { ran.Add(1); return nil }

		// a registers and waits for b; cut off, it times out and cannot
		// withdraw: owed to its session.
		first := make(chan error, 1)
		go func() { first <- ra.Once(ctx, "started", time.Second, callback) }()
		synctest.Wait()
		h.B.Disconnect(t, hs.Store)
		if err := <-first; !errors.Is(err, protocol.ErrGuaranteeTimeout) {
			t.Fatalf("a's Once while cut off: %v, want ErrGuaranteeTimeout", err)
		}

		// The session resumes; the watcher's payment is held before it
		// reads a's second registration (its first is deleted by then).
		second := "/" + h.NS + "/job/guarantee/started/" + strconv.Itoa(ra.Shards()[1].Item)
		held, release := make(chan struct{}), make(chan struct{})
		hs.OnNext("Get", second, func() {
			close(held)
			<-release
		})
		h.B.Reconnect(t, hs.Store)
		synctest.Wait()
		select {
		case <-held:
		default:
			t.Fatal("the watcher did not pay the withdrawal owed to the resumed session")
		}

		// a's next Once comes while the payment is under way.
		next := make(chan error, 1)
		go func() { next <- ra.Once(ctx, "started", time.Second, callback) }()
		synctest.Wait()
		close(release)
		synctest.Wait()
		if err := rb.Once(ctx, "started", time.Second, callback); err != nil {
			t.Errorf("b's Once: %v", err)
		}
		if err := <-next; err != nil {
			t.Errorf("a's next Once: %v", err)
		}
		if n := ran.Load(); n != 1 {
			t.Fatalf("%d callbacks ran for the set of a's next Once and b's, want 1", n)
		}
	})
}

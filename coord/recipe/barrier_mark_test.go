package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// markBarrier returns a participant's Barrier on its own session of srv,
// over items 0..1 of guarantee/completed, items in disabled left out.
func markBarrier(t *testing.T, srv *memstore.Server, id string, disabled *atomic.Bool) (Barrier, *memstore.Session) {
	st := srv.Connect()
	t.Cleanup(func() { _ = st.Close() })
	return Barrier{
		Store: st, Dir: "/ns/job/guarantee/completed", ID: id, Name: "job",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Total: 2,
		Disabled: func(_ context.Context, it int) (bool, error) { return it == 1 && disabled.Load(), nil },
		Debts:    &Debts{},
	}, st
}

// A run of an item disabled after it began (a failover claim checks the
// item is enabled; the disable can come after) registers while a set
// completed without it runs its callback: that registration is not the
// set's, and the set's clear must leave it. Before the fix the clear
// deleted every registration it read after the callback, and the late
// run's Once returned nil, released by a set whose callback started before
// its call (memstore simulation seed 9901133 with group commit: "s1's Once
// returned without a callback having run during it"). In a synctest bubble.
func TestOnceClearLeavesARegistrationMadeAfterTheSetWasTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		var disabled atomic.Bool
		disabled.Store(true) // item 1 disabled after its run began
		a, _ := markBarrier(t, srv, "a", &disabled)
		b, _ := markBarrier(t, srv, "b", &disabled)

		inCallback, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			aDone <- a.Run(t.Context(), []int{0}, 5*time.Second, func(context.Context) error {
				close(inCallback)
				<-release
				return nil
			})
		}()
		<-inCallback // a's set (item 1 disabled) taken
		bDone, bRan := runNoting(t.Context(), b, []int{1}, 2*time.Second)
		synctest.Wait() // b registered item 1, found the set complete and the latch held
		close(release)
		if err := <-aDone; err != nil {
			t.Fatalf("a's Run: %v", err)
		}
		err := <-bDone
		if err == nil && !bRan.Load() {
			t.Fatal("b's Run returned nil without a callback: released by a set taken before its call")
		}
		if !errors.Is(err, ErrBarrierTimeout) {
			t.Fatalf("b's Run = %v (callback ran: %v), want a timeout (item 0 never registers again)", err, bRan.Load())
		}
	})
}

// A runner whose session ends during its callback leaves the other
// participants' registrations of its set (their sessions live on). They
// were served by its callback and must not count in the next set: a later
// run of the runner's item, on another server, finds the set complete with
// them and the latch free (it went with the session). Before the fix it
// ran a second callback over them (ZooKeeper simulation seed 1900373: "the
// registration of item 0 served by two callbacks, s3's then s0's", after
// `expire s3`). In a synctest bubble.
func TestOnceRegistrationsOfASetWhoseRunnerExpiredDoNotCountAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		var never atomic.Bool
		w, _ := markBarrier(t, srv, "w", &never)
		r, rSession := markBarrier(t, srv, "r", &never)
		x, _ := markBarrier(t, srv, "x", &never)

		wDone := make(chan error, 1)
		go func() {
			wDone <- w.Run(t.Context(), []int{0}, 5*time.Second, func(context.Context) error { return nil })
		}()
		synctest.Wait() // w registered item 0 and waits for item 1
		inCallback, release := make(chan struct{}), make(chan struct{})
		rDone := make(chan error, 1)
		go func() {
			rDone <- r.Run(t.Context(), []int{1}, 5*time.Second, func(context.Context) error {
				close(inCallback)
				<-release
				return nil
			})
		}()
		<-inCallback
		rSession.Expire() // r's registration and latch go; w's stays
		xDone, xRan := runNoting(t.Context(), x, []int{1}, 2*time.Second)
		synctest.Wait()
		close(release)
		<-rDone
		xErr := <-xDone
		if xRan.Load() {
			t.Fatal("x's callback ran over w's registration, already served by r's callback")
		}
		if !errors.Is(xErr, ErrBarrierTimeout) {
			t.Fatalf("x's Run = %v, want a timeout (item 0's next run never registers)", xErr)
		}
		if err := <-wDone; err != nil {
			t.Fatalf("w's Run = %v, want nil (r's callback ran during it)", err)
		}
	})
}

// The runner whose session ended during its callback clears its set on its
// next session: the other participants are released then, not left to time
// out with their registrations counting in the next set meanwhile.
func TestOnceRunnerWhoseSessionEndedInTheCallbackReleasesItsSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		var never atomic.Bool
		w, _ := markBarrier(t, srv, "w", &never)
		r, rSession := markBarrier(t, srv, "r", &never)

		wDone := make(chan error, 1)
		go func() {
			wDone <- w.Run(t.Context(), []int{0}, 5*time.Second, func(context.Context) error { return nil })
		}()
		synctest.Wait()
		start := time.Now()
		err := r.Run(t.Context(), []int{1}, 5*time.Second, func(context.Context) error {
			rSession.Expire()
			return nil
		})
		if err != nil {
			t.Fatalf("r's Run: %v", err)
		}
		if err := <-wDone; err != nil {
			t.Fatalf("w's Run = %v, want nil (r's callback ran during it)", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("w released %v after r's callback, want at once", waited)
		}
	})
}

// lostTake fails the first take (the Multi creating the runner latch) of
// its store with a lost connection, after applying it or not.
type lostTake struct {
	store.Store
	apply bool
	done  atomic.Bool
}

func (s *lostTake) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	take := false
	for _, op := range ops {
		if c, ok := op.(*store.CreateOp); ok && store.Base(c.Path) == onceRunner {
			take = true
		}
	}
	if !take || s.done.Swap(true) {
		return s.Store.Multi(ctx, ops...)
	}
	if s.apply {
		if _, err := s.Store.Multi(ctx, ops...); err != nil {
			return nil, err
		}
	}
	return nil, store.ErrConnectionLoss
}

// A take whose reply is lost may have been applied: the runner reads which
// from the store. Applied, it runs the callback (the set is its: nobody
// else can take it, and its participants wait for its clear); not applied,
// it registers again and takes the set then. Either way the callback runs
// once and releases the other participant.
func TestOnceTakeWithItsReplyLost(t *testing.T) {
	for _, apply := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", apply), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := memstore.NewServer()
				var never atomic.Bool
				w, _ := markBarrier(t, srv, "w", &never)
				r, _ := markBarrier(t, srv, "r", &never)
				r.Store = &lostTake{Store: r.Store, apply: apply}
				wDone := make(chan error, 1)
				go func() {
					wDone <- w.Run(t.Context(), []int{0}, 5*time.Second, func(context.Context) error {
						return errors.New("w's callback ran: w did not complete the set")
					})
				}()
				synctest.Wait()
				var calls atomic.Int32
				if err := r.Run(t.Context(), []int{1}, 5*time.Second, func(context.Context) error {
					calls.Add(1)
					return nil
				}); err != nil {
					t.Fatalf("r's Run: %v", err)
				}
				if err := <-wDone; err != nil {
					t.Fatalf("w's Run = %v, want nil", err)
				}
				if n := calls.Load(); n != 1 {
					t.Fatalf("r's callback ran %d times, want 1", n)
				}
				chk := srv.Connect()
				defer chk.Close()
				kids, _, err := chk.Children(t.Context(), "/ns/job/guarantee/completed")
				if err != nil || len(kids) != 0 {
					t.Fatalf("after the set: children %v (%v), want none", kids, err)
				}
				if data, _, err := chk.Get(t.Context(), "/ns/job/guarantee/completed"); err != nil || len(data) != 0 {
					t.Fatalf("after the set: mark %q left (%v)", data, err)
				}
			})
		})
	}
}

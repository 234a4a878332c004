package recipe

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// connect opens a memstore session closed at the end of the test.
func connect(t *testing.T, srv *memstore.Server) *memstore.Session {
	t.Helper()
	s := srv.Connect()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The try-latch: one holder at a time, no wait in TryAcquire, one bounded
// wait in AcquireWithin, and a holder's release or session end frees it.
// In a synctest bubble (AcquireWithin's bound passes at once).
func TestTryLatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		srv := memstore.NewServer()
		a, b := connect(t, srv), connect(t, srv)
		if err := store.CreateAll(ctx, a, "/l"); err != nil {
			t.Fatal(err)
		}
		la, lb := NewTryLatch(a, "/l/latch", []byte("a")), NewTryLatch(b, "/l/latch", []byte("b"))
		if held, err := la.TryAcquire(ctx); !held || err != nil {
			t.Fatalf("a's TryAcquire of a free latch: %v, %v; want held", held, err)
		}
		if held, err := lb.TryAcquire(ctx); held || err != nil {
			t.Fatalf("b's TryAcquire of a's latch: %v, %v; want not held, no error", held, err)
		}
		if held, err := lb.AcquireWithin(ctx, time.Second); held || err != nil {
			t.Fatalf("b's AcquireWithin while a holds past the bound: %v, %v; want not held", held, err)
		}

		// A release within the bound hands the latch over.
		got := make(chan bool, 1)
		go func() {
			held, err := lb.AcquireWithin(ctx, time.Minute)
			if err != nil {
				t.Errorf("b's AcquireWithin: %v", err)
			}
			got <- held
		}()
		synctest.Wait() // b waits on the held latch
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := la.Release(cancelled); err != nil { // not cancelled by ctx
			t.Fatalf("a's Release with an ended ctx: %v", err)
		}
		if !<-got {
			t.Fatal("b's AcquireWithin did not take the latch a released while it waited")
		}
		if data, _, err := a.Get(ctx, lb.Path()); err != nil || string(data) != "b" {
			t.Fatalf("latch node %q, %v; want b's", data, err)
		}

		// The holder's session ends: the latch goes with it.
		b.Expire()
		if held, err := la.TryAcquire(ctx); !held || err != nil {
			t.Fatalf("a's TryAcquire after b's session ended: %v, %v; want held", held, err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatalf("b's Release of a latch it no longer holds: %v", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatalf("a second Release: %v, want none (a latch already gone is no error)", err)
		}
	})
}

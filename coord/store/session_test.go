package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

func TestAwaitSession(t *testing.T) {
	s := memstore.NewServer().Connect()
	defer s.Close()
	first, _ := s.Session()

	// Already true: returns at once.
	got, err := store.AwaitSession(context.Background(), s, func(cur store.Session) bool { return cur.State == store.StateConnected })
	if err != nil || got.ID != first.ID {
		t.Fatalf("AwaitSession(connected) = %+v, %v", got, err)
	}

	// Follows a change: Expire moves to a new session id.
	done := make(chan store.Session, 1)
	go func() {
		cur, _ := store.AwaitSession(context.Background(), s, func(cur store.Session) bool {
			return cur.ID != first.ID && cur.State == store.StateConnected
		})
		done <- cur
	}()
	s.Expire()
	select {
	case cur := <-done:
		if cur.ID == first.ID {
			t.Fatalf("returned the old session %x", cur.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitSession missed the new session")
	}

	// Never true: ctx ends it with the last session seen.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	cur, err := store.AwaitSession(ctx, s, func(store.Session) bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) || cur.State != store.StateConnected {
		t.Fatalf("AwaitSession(never) = %+v, %v; want the current session and DeadlineExceeded", cur, err)
	}
}

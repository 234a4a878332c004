package memstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

var knownErrors = []error{
	store.ErrNoNode, store.ErrNodeExists, store.ErrBadVersion, store.ErrNotEmpty,
	store.ErrEphemeralChild, store.ErrNoParent, store.ErrConnectionLoss,
}

// TestChaosKeepsInvariants runs random reads, writes, multis and watches
// from 8 goroutines on 4 sessions while another goroutine disconnects,
// reconnects and expires them, then checks the tree's invariants and that
// closing every session leaves no ephemeral node and no watch behind.
func TestChaosKeepsInvariants(t *testing.T) {
	ctx := context.Background()
	srv := memstore.NewServer()
	sessions := make([]*memstore.Session, 4)
	for i := range sessions {
		sessions[i] = srv.Connect(memstore.WithSessionTimeout(memstore.DefaultSessionTimeout))
	}
	if err := store.CreateAll(ctx, sessions[0], "/c"); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/c/a", "/c/b", "/c/a/x", "/c/a/y", "/c/b/x", "/c/q"}
	modes := []store.Mode{store.Persistent, store.Ephemeral, store.PersistentSequential, store.EphemeralSequential}

	const workers, opsPerWorker = 8, 400
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		s := sessions[w%len(sessions)]
		rng := rand.New(rand.NewPCG(1, uint64(w)))
		wg.Go(func() {
			for range opsPerWorker {
				p := paths[rng.IntN(len(paths))]
				var err error
				switch rng.IntN(8) {
				case 0:
					_, err = s.Create(ctx, p, []byte("d"), modes[rng.IntN(len(modes))])
				case 1:
					_, err = s.Set(ctx, p, []byte("s"), int32(rng.IntN(3))-1)
				case 2:
					err = s.Delete(ctx, p, store.AnyVersion)
				case 3:
					_, _, _, err = s.GetW(ctx, p)
				case 4:
					_, _, _, err = s.ExistsW(ctx, p)
				case 5:
					_, _, _, err = s.ChildrenW(ctx, store.Parent(p))
				case 6:
					_, err = s.Multi(ctx,
						&store.CheckOp{Path: store.Parent(p), Version: store.AnyVersion},
						&store.CreateOp{Path: p, Mode: modes[rng.IntN(len(modes))]},
						&store.SetOp{Path: store.Parent(p), Data: []byte("m"), Version: store.AnyVersion})
				case 7:
					err = store.DeleteAll(ctx, s, p)
				}
				if err != nil && !isKnown(err) {
					errs[w] = err
					return
				}
			}
		})
	}
	chaos := rand.New(rand.NewPCG(2, 2))
	for range 200 {
		s := sessions[chaos.IntN(len(sessions))]
		switch chaos.IntN(3) {
		case 0:
			s.Disconnect()
		case 1:
			s.Reconnect()
		case 2:
			s.Expire()
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: unexpected error %v", i, err)
		}
	}
	for _, s := range sessions {
		s.Reconnect()
	}
	if err := srv.CheckInvariants(); err != nil {
		t.Fatalf("after chaos: %v", err)
	}
	for _, s := range sessions {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.CheckInvariants(); err != nil {
		t.Fatalf("after closing every session: %v", err)
	}
	if st := srv.Stats(); st.Watches != 0 || st.Sessions != 0 {
		t.Fatalf("after closing every session: %d watches and %d sessions remain", st.Watches, st.Sessions)
	}
	probe := srv.Connect()
	defer probe.Close()
	var walk func(p string)
	walk = func(p string) {
		names, _, err := probe.Children(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			c := store.Join(p, n)
			if _, st, err := probe.Get(ctx, c); err != nil || st.EphemeralOwner != 0 {
				t.Fatalf("%s survived its session (owner 0x%x, err %v)", c, st.EphemeralOwner, err)
			}
			walk(c)
		}
	}
	walk("/")
}

func isKnown(err error) bool {
	for _, k := range knownErrors {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

package protocol_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/storecount"
)

// A steady-state Begin reads the flag directory, its sharding node and the
// failover directory from the job's tree cache: its transaction is its
// only request (3 direct reads and the Multi before, 4 round trips in a
// row with Complete's). Its version checks refuse a cache that lags (the
// suite's BeginOnLagging* tests). 3 servers, 6 items, in a synctest bubble.
func TestBeginReadsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		const s = 3
		cs := make([]*storecount.Store, s)
		servers := make([]*coordtest.Server, s)
		for i := range s {
			cs[i] = storecount.New(h.B.Connect(t))
			srv, err := h.TryStart(fmt.Sprintf("s%d", i), coordtest.Config("job", 2*s), cs[i])
			if err != nil {
				t.Fatal(err)
			}
			servers[i] = srv
		}
		for range 2 { // the reshard, then every server's layout guard
			coordtest.CompleteAll(t, coordtest.BeginAll(t, servers...)...)
			synctest.Wait()
		}
		before := make([]storecount.Counts, s)
		for i, c := range cs {
			before[i] = c.Counts()
		}
		runs := coordtest.BeginAll(t, servers...)
		coordtest.AssertPartition(t, 2*s, runs...)
		for i, c := range cs {
			if d := c.Counts().Sub(before[i]); d.Reads != 0 || d.Writes != 1 {
				t.Errorf("%s's Begin: %d reads and %d writes, want 0 and 1 (its three nodes from the tree cache, one Multi)", servers[i].ID, d.Reads, d.Writes)
			}
		}
		coordtest.CompleteAll(t, runs...)
	})
}

// TakeMisfire after a run with no item flagged misfire answers from the
// tree cache: no read (2 direct reads before, after every Complete of a
// job with misfire on, the default). A flag of this server's own Begin is
// written through to its cache, and TakeMisfire then reads directly and
// takes it. In a synctest bubble.
func TestTakeMisfireReadsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cs := storecount.New(h.B.Connect(t))
		a, err := h.TryStart("a", coordtest.Config("job", 2), cs)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
			synctest.Wait()
		}
		before := cs.Counts()
		again, err := a.Job.TakeMisfire(t.Context())
		if d := cs.Counts().Sub(before); err != nil || again || d.Reads != 0 || d.Writes != 0 {
			t.Fatalf("TakeMisfire with no flag: %v, %v after %d reads and %d writes; want false, nil after none", again, err, d.Reads, d.Writes)
		}
		// A trigger while the run goes on flags its items misfire.
		run := coordtest.BeginAll(t, a)[0]
		if _, err := a.Job.Begin(t.Context(), time.Now()); !errors.Is(err, protocol.ErrItemsRunning) {
			t.Fatalf("Begin beside the run: %v, want ErrItemsRunning", err)
		}
		coordtest.CompleteAll(t, run)
		if again, err := a.Job.TakeMisfire(t.Context()); err != nil || !again {
			t.Fatalf("TakeMisfire after a misfire: %v, %v; want true", again, err)
		}
		if again, err := a.Job.TakeMisfire(t.Context()); err != nil || again {
			t.Fatalf("second TakeMisfire: %v, %v; want false (flags cleared)", again, err)
		}
	})
}

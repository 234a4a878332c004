package protocol_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/coordtest"
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

package coordtest

import (
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// testEpochAfterFailover: an item's epoch grows across every change of its
// owner, including a failover claim made after the reshard and the item's
// return to its owner after the failover run. Before the fix the owner's
// next run carried its sharding node's Mzxid, below the failover node's
// Czxid, and a highest-epoch fence kept the owner out of its item until the
// next reshard (simulation seeds 1105, 1154 with SIM_FAILOVER_CLAIMS=1).
// The claimer is the item's new owner itself, or (other) the other
// survivor, whose failover run's end the owner learns from its watches.
func testEpochAfterFailover(t *testing.T, h *Harness, other bool) {
	const n = 4
	c := h.Start("c", Config("job", n, withFailover)) // leader
	a := h.Start("a", Config("job", n, withFailover))
	b := h.Start("b", Config("job", n, withFailover))
	runs := BeginAll(t, c, a, b)
	parts := AssertPartition(t, n, runs...)
	CompleteAll(t, runs[0], runs[2]) // c and b finish; a crashes mid-run
	item := parts[1][0]
	h.B.Kill(t, a.St)
	h.Signals.FailoverQueued.Wait(t, signalWait, "a's unfinished items queued for failover", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, parts[1])
	})
	// The reshard (no item runs, so the leader's watcher does it at once)
	// comes before the claim: the claim's failover node is younger than
	// every sharding node.
	var owner *Server
	Eventually(t, "a's items resharded to the survivors", func() bool {
		if status(t, h, "job").ReshardingPending {
			return false
		}
		for _, s := range []*Server{c, b} {
			if slices.Contains(serverStatus(t, h, "job", s.ID).Sharding, item) {
				owner = s
				return true
			}
		}
		return false
	})
	claimer := owner
	if other {
		claimer = c
		if owner == c {
			claimer = b
		}
	}
	WaitSignal(t, claimer.Job, protocol.SignalFailover)
	if ok, err := claimer.Job.ClaimFailover(testCtx(t)); err != nil || !ok {
		t.Fatalf("ClaimFailover on %s = %v, %v", claimer.ID, ok, err)
	}
	frun, err := claimer.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fsh := frun.Shards()
	if len(fsh) != 1 || !fsh[0].Failover || fsh[0].Item != item {
		t.Fatalf("failover run shards = %+v, want item %d as failover", fsh, item)
	}
	CompleteAll(t, frun)

	// The owner's next run: the item is back with its owner, and its epoch
	// is above the failover run's; the owner's other items keep theirs
	// (the sharding node's Mzxid, below the claim: the case in point).
	// Another claimer's end reaches the owner through its watch on the
	// failover node: until then its runs leave the item out.
	var nrun *protocol.Run
	Eventually(t, "the owner's run carries the item again", func() bool {
		r, err := owner.Job.Begin(testCtx(t), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(r.Shards(), func(s protocol.Assignment) bool { return s.Item == item }) {
			nrun = r
			return true
		}
		CompleteAll(t, r)
		if !other {
			t.Fatalf("owner %s's run %+v lacks item %d right after its own failover run of it", owner.ID, r.Shards(), item)
		}
		return false
	})
	defer CompleteAll(t, nrun)
	var got *protocol.Assignment
	for _, s := range nrun.Shards() {
		if s.Failover {
			t.Fatalf("owner %s's run %+v has a failover item", owner.ID, nrun.Shards())
		}
		if s.Item == item {
			got = &s
		} else if s.Epoch >= fsh[0].Epoch {
			t.Fatalf("owner %s's item %d has epoch %d, not below the failover claim's %d: the claim did not come after the reshard",
				owner.ID, s.Item, s.Epoch, fsh[0].Epoch)
		}
	}
	if got.Epoch <= fsh[0].Epoch {
		t.Fatalf("item %d back with %s has epoch %d after its failover run had %d: the epoch must grow",
			item, owner.ID, got.Epoch, fsh[0].Epoch)
	}
	if err := nrun.CheckOwnership(testCtx(t), item); err != nil {
		t.Fatalf("CheckOwnership of item %d back with its owner: %v", item, err)
	}
}

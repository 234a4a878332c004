package coordtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
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
	frun := claimAndBegin(t, claimer)
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

// testEpochAfterALostClaim: the owner's run of an item whose failover run
// was cut (its claimer's session ended after a commit) carries an epoch
// above the cut run's, when the owner's Begin finds the lost claim's record
// before the leader's scan queues it again. The claim came after the
// reshard, so the owner's sharding node is older than the claim; before
// the fix the Begin consumed the record with the sharding node's Mzxid as
// the epoch, below the claim's Czxid, and a highest-epoch fence the cut
// run had written (a sink fencing in its own transaction) refused the
// owner's commits until the next reshard (workflow simulation seed
// 51001084). Every other server's writes are held from the claimer's end
// until the owner's Begin returns: the leader reacts to that end (its scan,
// a reshard) only after.
func testEpochAfterALostClaim(t *testing.T, h *Harness) {
	const n = 8
	type beginKey struct{}
	var mu sync.Mutex
	holding, released := false, make(chan struct{})
	hold := func(ctx context.Context, c Call) error {
		if c.Method != "Multi" && c.Method != "Create" || ctx.Value(beginKey{}) != nil {
			return nil
		}
		mu.Lock()
		wait := holding
		mu.Unlock()
		if wait {
			select {
			case <-released:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	start := func(id string) *Server {
		s, err := h.TryStart(id, Config("job", n, withFailover), &HookStore{Store: h.B.Connect(t), Before: hold})
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		return s
	}
	l := start("l") // leader
	o := start("o")
	c := start("c")
	a := start("a")
	runs := BeginAll(t, l, o, c, a)
	parts := AssertPartition(t, n, runs...)
	CompleteAll(t, runs[0], runs[1], runs[2]) // a crashes mid-run
	h.B.Kill(t, unwrapHook(a.St))
	h.Signals.FailoverQueued.Wait(t, signalWait, "a's unfinished items queued for failover", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, parts[3])
	})
	// The reshard comes before the claim. The owner is a server that is
	// not the leader; the claimer is the third.
	var owner *Server
	item := -1
	Eventually(t, "a's items resharded to the survivors", func() bool {
		if status(t, h, "job").ReshardingPending {
			return false
		}
		for _, it := range parts[3] {
			for _, s := range []*Server{o, c} {
				if slices.Contains(serverStatus(t, h, "job", s.ID).Sharding, it) {
					owner, item = s, it
					return true
				}
			}
		}
		return false
	})
	claimer := c
	if owner == c {
		claimer = o
	}
	frun := claimAndBegin(t, claimer)
	var cut *protocol.Assignment
	for _, s := range frun.Shards() {
		if s.Item == item && s.Failover {
			cut = &s
		}
	}
	if cut == nil {
		t.Fatalf("failover run shards = %+v, want item %d as failover", frun.Shards(), item)
	}
	if err := frun.CheckOwnership(testCtx(t), item); err != nil {
		t.Fatalf("the failover run's fence of item %d: %v", item, err) // its commit
	}

	// The claimer's session ends mid-run; the owner begins at once.
	mu.Lock()
	holding = true
	mu.Unlock()
	h.B.Kill(t, unwrapHook(claimer.St))
	nrun, err := owner.Job.Begin(context.WithValue(testCtx(t), beginKey{}, true), time.Now())
	mu.Lock()
	holding = false
	mu.Unlock()
	close(released)
	if err != nil {
		t.Fatalf("the owner's Begin: %v", err)
	}
	defer CompleteAll(t, nrun)
	for _, s := range nrun.Shards() {
		if s.Item != item {
			continue
		}
		if s.Epoch <= cut.Epoch {
			t.Fatalf("item %d back with its owner %s has epoch %d after its cut failover run had %d: the epoch must grow",
				item, owner.ID, s.Epoch, cut.Epoch)
		}
		if err := nrun.CheckOwnership(testCtx(t), item); err != nil {
			t.Fatalf("CheckOwnership of item %d back with its owner: %v", item, err)
		}
		return
	}
	t.Fatalf("the owner %s's run %+v lacks item %d, whose failover run was cut", owner.ID, nrun.Shards(), item)
}

// unwrapHook is the store a HookStore wraps (st itself otherwise).
func unwrapHook(st store.Store) store.Store {
	if h, ok := st.(*HookStore); ok {
		return h.Store
	}
	return st
}

// claimAndBegin waits for claimer's failover signal, claims the queued item
// and begins its failover run.
func claimAndBegin(t *testing.T, claimer *Server) *protocol.Run {
	t.Helper()
	WaitSignal(t, claimer.Job, protocol.SignalFailover)
	if ok, err := claimer.Job.ClaimFailover(testCtx(t)); err != nil || !ok {
		t.Fatalf("ClaimFailover on %s = %v, %v", claimer.ID, ok, err)
	}
	frun, err := claimer.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return frun
}

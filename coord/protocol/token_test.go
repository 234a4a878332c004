package protocol_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// TestQueueEntryIsTheToken: a crashed server's cut run is run again once,
// by whichever run consumes an item's queue entry. Owner first: the
// survivors' normal Begins after the reshard run the crashed items and
// delete their entries in their transactions, and no claim is left to
// make. Claim first: a claimed item is skipped by its new owner's normal
// Begin (the claim bumped the failover version the Begin checks) and runs
// once, in the claimer's failover run.
func TestQueueEntryIsTheToken(t *testing.T) {
	for _, claimFirst := range []bool{false, true} {
		name := "owner first"
		if claimFirst {
			name = "claim first"
		}
		t.Run(name, func(t *testing.T) { queueEntryIsTheToken(t, claimFirst) })
	}
}

func queueEntryIsTheToken(t *testing.T, claimFirst bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 6
	h := coordtest.NewHarness(t, coordtest.Mem())
	cfg := coordtest.Config("job", n, func(c *jobconfig.Config) { c.Failover = true })
	l := h.Start("l", cfg) // the leader
	a := h.Start("a", cfg)
	b := h.Start("b", cfg)
	runs := coordtest.BeginAll(t, l, a, b)
	parts := coordtest.AssertPartition(t, n, runs...)
	coordtest.CompleteAll(t, runs[0], runs[2])
	crashed := parts[1]
	h.B.Kill(t, a.St)
	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "a's cut run queued", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, crashed)
	})
	var claimed []protocol.Assignment
	if claimFirst {
		coordtest.WaitSignal(t, b.Job, protocol.SignalFailover)
		ok, err := b.Job.ClaimFailover(ctx)
		if err != nil || !ok {
			t.Fatalf("ClaimFailover = %v, %v", ok, err)
		}
		fr := coordtest.BeginAll(t, b)
		claimed = fr[0].Shards()
		if len(claimed) != 1 || !claimed[0].Failover || !slices.Contains(crashed, claimed[0].Item) {
			t.Fatalf("b's failover run %+v, want one of a's items %v", claimed, crashed)
		}
		defer coordtest.CompleteAll(t, fr...)
	}
	// The survivors' normal runs after the reshard (the leader's Begin
	// reshards; b's first Begin above may have come before it).
	var normal []*protocol.Run
	for _, s := range []*coordtest.Server{l, b} {
		if claimFirst && s == b {
			continue // b runs its claim now; its normal items wait
		}
		normal = append(normal, coordtest.BeginAll(t, s)...)
	}
	ran := map[int]int{}
	for _, r := range normal {
		for _, sh := range r.Shards() {
			ran[sh.Item]++
		}
	}
	for _, c := range claimed {
		if ran[c.Item] != 0 {
			t.Fatalf("item %d runs in a normal run beside its failover run: the claim did not hold its new owner off", c.Item)
		}
	}
	coordtest.CompleteAll(t, normal...)
	st, err := h.Admin.Status(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !claimFirst {
		if len(st.FailoverQueue) != 0 {
			t.Fatalf("queue after the owners' runs: %v, want empty (each run consumed its items' entries)", st.FailoverQueue)
		}
		for _, it := range crashed {
			if ran[it] != 1 {
				t.Fatalf("crashed item %d ran %d times in the owners' runs, want once", it, ran[it])
			}
		}
		if ok, err := l.Job.ClaimFailover(ctx); err != nil || ok {
			t.Fatalf("ClaimFailover after the owners consumed the entries = %v, %v; want nothing to claim", ok, err)
		}
	}
}

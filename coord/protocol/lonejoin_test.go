package protocol_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// A restarted server that finds no other server online reshards in its
// join's transaction (lonejoin.go): of its writes only that transaction
// writes sharding nodes (no prompt reshard follows), it takes every item,
// the offline server's sharding is emptied, the resharding flag its
// departure left is gone, and it runs every item. When the other server
// comes back, the leader reshards as before. In a synctest bubble.
func TestLoneJoinReshardsInItsTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 4)
		a, b := h.Start("a", cfg), h.Start("b", cfg)
		synctest.Wait()
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a, b)...)
		a.Stop(t)
		b.Stop(t)
		synctest.Wait()

		jobRoot := "/" + h.NS + "/job"
		st := h.B.Connect(t)
		defer func() { _ = st.Close() }()
		if ok, _, err := st.Exists(t.Context(), jobRoot+"/leader/sharding/necessary"); err != nil || !ok {
			t.Fatalf("after both left: resharding flag up %v (err %v), want up (their leaves raise it)", ok, err)
		}

		var shardingWrites, withHost atomic.Int32
		hs := &coordtest.HookStore{Store: h.B.Connect(t), After: func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method != "Multi" || err != nil {
				return err
			}
			writes := slices.ContainsFunc(c.Ops, func(op store.Op) bool {
				switch o := op.(type) {
				case *store.SetOp:
					return strings.HasSuffix(o.Path, "/sharding") && strings.Contains(o.Path, "/servers/")
				case *store.CreateOp:
					return strings.HasSuffix(o.Path, "/sharding") && strings.Contains(o.Path, "/servers/")
				}
				return false
			})
			if writes {
				shardingWrites.Add(1)
				if slices.ContainsFunc(c.Ops, func(op store.Op) bool {
					cr, ok := op.(*store.CreateOp)
					return ok && cr.Path == jobRoot+"/leader/election/host"
				}) {
					withHost.Add(1)
				}
			}
			return err
		}}
		a2, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n, m := shardingWrites.Load(), withHost.Load(); n != 1 || m != 1 {
			t.Fatalf("a's transactions writing sharding nodes: %d (%d with the host node), want 1: its join's", n, m)
		}
		for server, want := range map[string]string{"a": "0,1,2,3", "b": ""} {
			data, _, err := st.Get(t.Context(), jobRoot+"/servers/"+server+"/sharding")
			if err != nil || string(data) != want {
				t.Fatalf("servers/%s/sharding = %q (err %v), want %q", server, data, err, want)
			}
		}
		if ok, _, err := st.Exists(t.Context(), jobRoot+"/leader/sharding/necessary"); err != nil || ok {
			t.Fatalf("after a's lone join: resharding flag up %v (err %v), want gone", ok, err)
		}
		runs := coordtest.BeginAll(t, a2)
		if got := len(runs[0].Shards()); got != 4 {
			t.Fatalf("a alone runs %d items, want 4", got)
		}
		coordtest.CompleteAll(t, runs...)
		if s := h.Status(t, "job"); s.Leader != "a" {
			t.Fatalf("leader %q, want a", s.Leader)
		}

		// b joins a running job: not alone; the leader reshards.
		b2 := h.Start("b", cfg)
		synctest.Wait()
		runs = coordtest.BeginAll(t, a2, b2)
		coordtest.AssertPartition(t, 4, runs...)
		if len(runs[0].Shards()) == 0 || len(runs[1].Shards()) == 0 {
			t.Fatalf("after b joined: a runs %v, b runs %v; want both some", runs[0].Shards(), runs[1].Shards())
		}
		coordtest.CompleteAll(t, runs...)
	})
}

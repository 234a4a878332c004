package protocol_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
)

// limitedMem is a coordtest.Backend on a memstore server that refuses
// transactions above limit bytes; only Connect is used here.
type limitedMem struct {
	coordtest.Backend
	srv *memstore.Server
}

func newLimitedMem(limit int) *limitedMem {
	return &limitedMem{Backend: coordtest.Mem(), srv: memstore.NewServer(memstore.WithMaxRequestBytes(limit))}
}

func (b *limitedMem) Connect(t testing.TB) store.Store {
	s := b.srv.Connect()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// splitLimit is small enough that queueing splitItems items for failover
// takes several transactions, and large enough for the config's.
const (
	splitLimit = 16 << 10
	splitItems = 400
)

func itemsOf(t *testing.T, h *coordtest.Harness, job string) (running, completed int) {
	t.Helper()
	st, err := h.Admin.Status(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	// The status shows the times the records and per-item nodes hold.
	if err := coordtest.CheckItemTimes(context.Background(), h.AdminStore, h.NS, job, st); err != nil {
		t.Fatal(err)
	}
	for _, it := range st.Items {
		if it.Running {
			running++
		}
		if it.Completed {
			completed++
		}
	}
	return running, completed
}

// TestBeginCompleteOneTransaction: with a store that refuses transactions
// above 16 KB, a Begin and a Complete of 400 items are one transaction
// each (layout 2: a normal run writes its server's record and marker, no
// per-item node; before, they took about one part per 50 items here) and
// do what they did.
func TestBeginCompleteOneTransaction(t *testing.T) {
	b := newLimitedMem(splitLimit)
	h := coordtest.NewHarness(t, b)
	cs := storecount.New(b.Connect(t))
	srv, err := h.TryStart("s0", coordtest.Config("big", splitItems), cs)
	if err != nil {
		t.Fatal(err)
	}
	coordtest.CompleteAll(t, coordtest.BeginAll(t, srv)...) // the reshard
	before := cs.Counts()
	runs := coordtest.BeginAll(t, srv)
	if got := len(runs[0].Shards()); got != splitItems {
		t.Fatalf("run has %d items, want %d", got, splitItems)
	}
	begin := cs.Counts().Sub(before)
	if r, _ := itemsOf(t, h, "big"); r != splitItems {
		t.Fatalf("%d items running after Begin, want %d", r, splitItems)
	}
	before = cs.Counts()
	coordtest.CompleteAll(t, runs...)
	complete := cs.Counts().Sub(before)
	if r, c := itemsOf(t, h, "big"); r != 0 || c != splitItems {
		t.Fatalf("after Complete: %d running, %d completed; want 0 and %d", r, c, splitItems)
	}
	if begin.Multis != 1 || complete.Multis != 1 {
		t.Fatalf("Begin took %d transactions and Complete %d; want one each", begin.Multis, complete.Multis)
	}
	st, err := h.Admin.Status(context.Background(), "big")
	if err != nil || len(st.Servers) != 1 || st.Servers[0].Status != "READY" {
		t.Fatalf("status after Complete: %+v, %v; want the server READY", st.Servers, err)
	}
}

// TestSplitFailoverQueueing: the transaction that still grows with the
// items, the leader's queueing of a crashed server's cut run, is split
// below the request limit (each part fenced by the crashed server's
// sharding and record versions, the record marked queued in the last) and
// queues every item once.
func TestSplitFailoverQueueing(t *testing.T) {
	b := newLimitedMem(splitLimit)
	h := coordtest.NewHarness(t, b)
	cfg := coordtest.Config("big", 2*splitItems, func(c *jobconfig.Config) { c.Failover = true })
	cs := storecount.New(b.Connect(t))
	l, err := h.TryStart("l", cfg, cs) // the leader
	if err != nil {
		t.Fatal(err)
	}
	a := h.Start("a", cfg)
	runs := coordtest.BeginAll(t, l, a)
	parts := coordtest.AssertPartition(t, 2*splitItems, runs...)
	coordtest.CompleteAll(t, runs[0])
	before := cs.Counts()
	h.B.Kill(t, a.St)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var q []int
	for len(q) != len(parts[1]) {
		st, err := h.Admin.Status(ctx, "big")
		if err != nil {
			t.Fatal(err)
		}
		q = st.FailoverQueue
		if ctx.Err() != nil {
			t.Fatalf("failover queue %d items, want a's %d", len(q), len(parts[1]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(q, parts[1]) {
		t.Fatalf("failover queue %v, want a's items %v", q, parts[1])
	}
	if m := cs.Counts().Sub(before).Multis; m < 3 {
		t.Fatalf("the leader made %d transactions queueing %d items; want several below the %d-byte limit", m, len(q), splitLimit)
	}
	rec, _, err := h.AdminStore.Get(ctx, fmt.Sprintf("/%s/big/servers/a/run", h.NS))
	if err != nil || !strings.Contains(string(rec), `"queued":true`) {
		t.Fatalf("a's record after the queueing: %s, %v; want it marked queued", rec, err)
	}
}

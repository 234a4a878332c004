package coord_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
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

// splitLimit is small enough that a Begin or Complete of splitItems items
// takes several transactions, and large enough for the config's.
const (
	splitLimit = 16 << 10
	splitItems = 64
)

func itemsOf(t *testing.T, h *coordtest.Harness, job string) (running, completed int) {
	t.Helper()
	st, err := h.Admin.Status(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	// Split Begins and Completes (applied, fenced, undone) leave the run
	// record saying what the items' nodes say, or vouching for nothing.
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

// TestSplitTransactions: with a store that refuses large transactions,
// Begin and Complete of many items are split below the limit (several
// Multis, none refused) and do what one transaction did.
func TestSplitTransactions(t *testing.T) {
	b := newLimitedMem(splitLimit)
	h := coordtest.NewHarness(t, b)
	cs := coord.NewCountingStore(b.Connect(t))
	srv, err := h.TryStart("s0", coordtest.Config("big", splitItems), cs)
	if err != nil {
		t.Fatal(err)
	}
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
	if begin.Multis < 3 || complete.Multis < 3 {
		t.Fatalf("Begin took %d transactions and Complete %d; want several each below the %d-byte limit", begin.Multis, complete.Multis, splitLimit)
	}
	if s := h.Admin; s != nil {
		st, err := s.Status(context.Background(), "big")
		if err != nil || len(st.Servers) != 1 || st.Servers[0].Status != "READY" {
			t.Fatalf("status after Complete: %+v, %v; want the server READY", st.Servers, err)
		}
	}
}

// resharding is a HookStore's Before hook that changes the server's
// sharding node (as a reshard does) right before every second transaction
// of each Begin reaches the store: a split Begin's later parts are fenced
// out.
type resharding struct {
	other   store.Store // another session, for the interfering write
	path    string
	multis  atomic.Int64
	bumps   atomic.Int64
	enabled atomic.Bool
}

func (s *resharding) before(ctx context.Context, c coordtest.Call) error {
	fenced := false
	for _, op := range c.Ops {
		if chk, ok := op.(*store.CheckOp); ok && chk.Path == s.path {
			fenced = true
		}
	}
	if fenced && s.enabled.Load() && s.multis.Add(1)%2 == 0 {
		data, _, err := s.other.Get(ctx, s.path)
		if err != nil {
			return err
		}
		if _, err := s.other.Set(ctx, s.path, data, store.AnyVersion); err != nil {
			return err
		}
		s.bumps.Add(1)
	}
	return nil
}

// TestSplitBeginFencedAndUndone: when the sharding node changes between
// two parts of a split Begin, the later part is refused (every part
// carries the version check) and the parts already applied are undone:
// no running node is left, and the items completed before are completed
// again.
func TestSplitBeginFencedAndUndone(t *testing.T) {
	b := newLimitedMem(splitLimit)
	h := coordtest.NewHarness(t, b)
	rs := &resharding{other: b.Connect(t)}
	srv, err := h.TryStart("s0", coordtest.Config("big", splitItems), &coordtest.HookStore{Store: b.Connect(t), Before: rs.before})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.CompleteAll(t, coordtest.BeginAll(t, srv)...) // every item completed once
	rs.path = fmt.Sprintf("/%s/big/servers/s0/sharding", h.NS)
	rs.enabled.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := srv.Job.Begin(ctx, time.Now())
	if err == nil {
		_ = run.Complete(ctx, time.Time{})
		t.Fatal("Begin succeeded although the sharding node changed between its parts every time")
	}
	if !errors.Is(err, store.ErrBadVersion) {
		t.Fatalf("Begin: %v, want a version conflict (resharded while starting)", err)
	}
	if rs.bumps.Load() == 0 {
		t.Fatal("the interfering write never happened: the Begin was not split")
	}
	if r, c := itemsOf(t, h, "big"); r != 0 || c != splitItems {
		t.Fatalf("after the refused Begin: %d running, %d completed; want 0 and %d", r, c, splitItems)
	}
	// Without interference the next Begin runs every item.
	rs.enabled.Store(false)
	runs := coordtest.BeginAll(t, srv)
	if got := len(runs[0].Shards()); got != splitItems {
		t.Fatalf("run has %d items, want %d", got, splitItems)
	}
	coordtest.CompleteAll(t, runs...)
}

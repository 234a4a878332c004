package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestGroupCommitIsolatesEachRequest commits six Multi calls of one store
// as ONE batch: an administrator's transaction holds the txn row's lock
// while a write A is in flight, so the six queue behind it (in a known
// order) and go in the batch handed on when A commits. In it, one request
// fails a version check and another creates a node an earlier request of
// the batch created: each gets its own *store.MultiError and leaves nothing
// behind (no node, no event), while the four others commit with
// consecutive zxids, in queue order, above A's, and fire their watches. A sixth request, cancelled while
// queued, is not committed. Fails without the per-request savepoints (one
// refusal fails the whole batch) or with zxids taken per batch.
func TestGroupCommitIsolatesEachRequest(t *testing.T) {
	dsn, schema := freshSchema(t)
	var mu sync.Mutex
	var flushes []int
	pgstore.SetFlushHook(func(n int) {
		mu.Lock()
		flushes = append(flushes, n)
		mu.Unlock()
	})
	t.Cleanup(func() { pgstore.SetFlushHook(nil) })
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	peer := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	ctx := testCtx(t)
	for _, p := range []string{"/a", "/b", "/c1", "/c2", "/c3", "/c6"} {
		if _, err := st.Create(ctx, p, nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	watch := func(p string) <-chan store.Event {
		_, _, ch, err := peer.GetW(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	c1Changed, c2Changed, c3Changed, c6Changed := watch("/c1"), watch("/c2"), watch("/c3"), watch("/c6")
	_, _, c3KidBorn, err := peer.ExistsW(ctx, "/c3/kid")
	if err != nil {
		t.Fatal(err)
	}
	_, _, rootKids, err := peer.ChildrenW(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}

	admin := adminConn(t, dsn)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "UPDATE "+schema+".txn SET zxid = zxid WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	flushes = nil
	mu.Unlock()

	type result struct {
		res []store.OpResult
		err error
	}
	results := map[string]chan result{}
	start := func(name string, c context.Context, ops ...store.Op) {
		ch := make(chan result, 1)
		results[name] = ch
		go func() {
			res, err := st.Multi(c, ops...)
			ch <- result{res, err}
		}()
	}
	awaitWrites := func(flushing, queued int) {
		t.Helper()
		err := testwait.Poll(ctx, func(context.Context) error {
			if f, q := pgstore.Writes(st); f != flushing || q != queued {
				return fmt.Errorf("%d batches in flight, %d requests queued; want %d and %d", f, q, flushing, queued)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	set := func(p string, v int32) *store.SetOp {
		return &store.SetOp{Path: p, Data: []byte(p), Version: v}
	}
	start("A", ctx, set("/a", store.AnyVersion))
	awaitWrites(1, 0)
	// A waits on the lock in the database.
	observer := adminConn(t, dsn)
	err = testwait.Poll(ctx, func(ctx context.Context) error {
		var waiting int
		if err := observer.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+schema+"%multi_batch%'").Scan(&waiting); err != nil {
			return err
		}
		if waiting != 1 {
			return fmt.Errorf("%d writes wait on the txn row's lock, want A", waiting)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start("B", ctx, set("/b", store.AnyVersion))
	awaitWrites(1, 1)
	start("C1", ctx, set("/c1", store.AnyVersion))
	awaitWrites(1, 2)
	start("C2", ctx, &store.CreateOp{Path: "/c2/kid", Mode: store.Persistent}, set("/c2", store.AnyVersion))
	awaitWrites(1, 3)
	start("C3", ctx, &store.CreateOp{Path: "/c3/kid", Mode: store.Persistent}, &store.CheckOp{Path: "/c3", Version: 7}, set("/c3", store.AnyVersion))
	awaitWrites(1, 4)
	start("C4", ctx, &store.CreateOp{Path: "/c2/kid", Mode: store.Persistent})
	awaitWrites(1, 5)
	cancelled, cancel := context.WithCancel(ctx)
	start("C6", cancelled, set("/c6", store.AnyVersion))
	awaitWrites(1, 6)
	start("C5", ctx, &store.DeleteOp{Path: "/c1", Version: 1})
	awaitWrites(1, 7)
	cancel()
	if r := testwait.Recv(t, 10*time.Second, "the cancelled request's return", results["C6"]); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("C6, cancelled while queued: %v, want context.Canceled", r.err)
	}
	awaitWrites(1, 6)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	got := map[string]result{}
	for _, name := range []string{"A", "B", "C1", "C2", "C3", "C4", "C5"} {
		got[name] = testwait.Recv(t, 20*time.Second, name+"'s result", results[name])
	}
	for _, name := range []string{"A", "B", "C1", "C2", "C5"} {
		if got[name].err != nil {
			t.Fatalf("%s: %v, want it committed (a neighbour's refusal must not fail it)", name, got[name].err)
		}
	}
	var me *store.MultiError
	if err := got["C3"].err; !errors.As(err, &me) || me.Index != 1 || !errors.Is(err, store.ErrBadVersion) {
		t.Fatalf("C3: %v, want a *store.MultiError at index 1 with ErrBadVersion", err)
	}
	if err := got["C4"].err; !errors.As(err, &me) || me.Index != 0 || !errors.Is(err, store.ErrNodeExists) {
		t.Fatalf("C4: %v, want a *store.MultiError at index 0 with ErrNodeExists (C2 created /c2/kid before it in the batch)", err)
	}
	mu.Lock()
	sizes := slices.Clone(flushes)
	mu.Unlock()
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 6}) {
		t.Fatalf("flushes of %v requests, want A alone and B, C1..C5 in one batch: [1 6]", sizes)
	}

	zA, zB := got["A"].res[0].Stat.Mzxid, got["B"].res[0].Stat.Mzxid
	z1, z2 := got["C1"].res[0].Stat.Mzxid, got["C2"].res[1].Stat.Mzxid
	_, root, err := peer.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	z5 := root.Pzxid // C5 deleted /c1, a child of the root
	if zB <= zA || z1 != zB+1 || z2 != z1+1 || z5 != z2+1 {
		t.Fatalf("zxids A %d, then the batch's B %d, C1 %d, C2 %d, C5 %d: want the batch's consecutive in queue order (refusals take none), above A's", zA, zB, z1, z2, z5)
	}
	if _, kid, err := peer.Get(ctx, "/c2/kid"); err != nil || kid.Czxid != z2 {
		t.Fatalf("/c2/kid: czxid %d, %v; want C2's zxid %d", kid.Czxid, err, z2)
	}
	for _, p := range []string{"/c3/kid", "/c1"} {
		if ok, _, err := peer.Exists(ctx, p); err != nil || ok {
			t.Fatalf("%s exists %v (%v), want it absent", p, ok, err)
		}
	}
	if _, c3, err := peer.Get(ctx, "/c3"); err != nil || c3.Version != 0 {
		t.Fatalf("/c3 version %d (%v), want 0: the refused C3 set nothing", c3.Version, err)
	}
	if _, c6, err := peer.Get(ctx, "/c6"); err != nil || c6.Version != 0 {
		t.Fatalf("/c6 version %d (%v), want 0: the cancelled C6 was not committed", c6.Version, err)
	}
	for _, w := range []struct {
		ch   <-chan store.Event
		typ  store.EventType
		path string
	}{{c1Changed, store.EventNodeDataChanged, "/c1"}, {c2Changed, store.EventNodeDataChanged, "/c2"}, {rootKids, store.EventNodeChildrenChanged, "/"}} {
		ev := testwait.Recv(t, 10*time.Second, "the watch on "+w.path, w.ch)
		if ev.Type != w.typ || ev.Path != w.path {
			t.Fatalf("watch on %s: %v %s, want %v", w.path, ev.Type, ev.Path, w.typ)
		}
	}
	// The root's watch fired on C5's zxid, the batch's last: every event of
	// the batch has been dispatched by now.
	for p, ch := range map[string]<-chan store.Event{"/c3": c3Changed, "/c3/kid": c3KidBorn, "/c6": c6Changed} {
		select {
		case ev := <-ch:
			t.Fatalf("the watch on %s fired (%v) for a request that was not committed", p, ev.Type)
		default:
		}
	}
}

// TestWriteReturnsByItsOwnContextInABatchOnItsWay puts a write B in a
// batch with a write C, holds that batch (the test hook) and cancels B's
// ctx: B returns context.Canceled at once while the batch waits, and C
// commits once it goes on. Fails when a caller waits for its batch (B
// comes back only when the hold ends).
func TestWriteReturnsByItsOwnContextInABatchOnItsWay(t *testing.T) {
	dsn, schema := freshSchema(t)
	hold, held := make(chan struct{}), make(chan int, 4)
	pgstore.SetFlushHook(func(n int) {
		if n == 2 {
			held <- n
			<-hold
		}
	})
	t.Cleanup(func() { pgstore.SetFlushHook(nil) })
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	var release sync.Once
	free := func() { release.Do(func() { close(hold) }) }
	t.Cleanup(free) // before the store's Close (cleanups run last first)
	ctx := testCtx(t)
	for _, p := range []string{"/a", "/b", "/c"} {
		if _, err := st.Create(ctx, p, nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	admin := adminConn(t, dsn)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "UPDATE "+schema+".txn SET zxid = zxid WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	a := make(chan error, 1)
	go func() { _, err := st.Set(ctx, "/a", []byte("a"), store.AnyVersion); a <- err }()
	awaitQueued := func(queued int) {
		t.Helper()
		err := testwait.Poll(ctx, func(context.Context) error {
			if f, q := pgstore.Writes(st); f != 1 || q != queued {
				return fmt.Errorf("%d batches in flight, %d queued; want 1 and %d", f, q, queued)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	awaitQueued(0)
	bCtx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	b := make(chan error, 1)
	go func() { _, err := st.Set(bCtx, "/b", []byte("b"), store.AnyVersion); b <- err }()
	awaitQueued(1)
	c := make(chan error, 1)
	go func() { _, err := st.Set(ctx, "/c", []byte("c"), store.AnyVersion); c <- err }()
	awaitQueued(2)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, 10*time.Second, "A's commit", a); err != nil {
		t.Fatalf("A: %v", err)
	}
	testwait.Recv(t, 10*time.Second, "the batch of B and C, held", held)
	cancelB()
	if err := testwait.Recv(t, 10*time.Second, "B's return while its batch is held", b); !errors.Is(err, context.Canceled) {
		t.Fatalf("B: %v, want context.Canceled", err)
	}
	free()
	if err := testwait.Recv(t, 10*time.Second, "C's commit", c); err != nil {
		t.Fatalf("C: %v", err)
	}
	if _, sc, err := st.Get(ctx, "/c"); err != nil || sc.Version != 1 {
		t.Fatalf("/c version %d (%v), want 1", sc.Version, err)
	}
}

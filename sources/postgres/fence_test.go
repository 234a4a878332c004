package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sources/postgres"
)

// fencing is a transaction on a connection of its own that has run a
// commit's fencing statement, or is running it.
type fencing struct {
	tx       pgx.Tx
	pid      uint32
	err      error         // the statement's result, once finished is closed
	finished chan struct{} // closed when the statement has returned
}

// fenceAt begins a transaction on a connection of its own and runs in it
// the statement fencing a commit at epoch (held: the fence row is known to
// hold it), without waiting for the result. At the end of the test the
// statement is cancelled and waited for, then the transaction rolled back.
func fenceAt(t *testing.T, pool *pgxpool.Pool, epoch int64, held bool) *fencing {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	f := &fencing{tx: tx, pid: conn.Conn().PgConn().PID(), finished: make(chan struct{})}
	go func() {
		defer close(f.finished)
		_, f.err = tx.Exec(ctx, postgres.FenceStatement(shard(0, 1, 10, epoch), held))
	}()
	t.Cleanup(func() {
		cancel()
		<-f.finished
	})
	return f
}

// result waits for f's statement and returns its error.
func (f *fencing) result(t *testing.T) error {
	t.Helper()
	testwait.Recv(t, 30*time.Second, "the fencing statement's result", f.finished)
	return f.err
}

// refused waits for f's statement and reports whether it refused the epoch.
func (f *fencing) refused(t *testing.T) bool {
	t.Helper()
	err := f.result(t)
	if err != nil && !strings.Contains(err.Error(), "shardflow_fence refused the epoch") {
		t.Fatalf("fencing statement: %v", err)
	}
	return err != nil
}

// blocked waits until f's statement either waits for a lock (true) or has
// returned (false).
func (f *fencing) blocked(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var waiting bool
	testwait.For(t, 30*time.Second, "the fencing statement to wait for a lock or return", func() bool {
		select {
		case <-f.finished:
			return true
		default:
		}
		waiting = queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, int32(f.pid)) > 0
		return waiting
	})
	return waiting
}

// TestFenceOfAHeldEpochIsShared: commits at the epoch the fence row holds
// (the slices of one batch, several workers per item) hold the row side by
// side (FOR SHARE), none waiting for another's commit; a newer epoch's
// first commit waits until they have all ended, and once it has committed,
// the older epoch is refused, also to a commit whose fence waited for it.
func TestFenceOfAHeldEpochIsShared(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	if err := postgres.MigrateFencing(ctx, pool); err != nil {
		t.Fatal(err)
	}
	first := fenceAt(t, pool, 5, false) // no row yet: written
	if first.refused(t) {
		t.Fatal("epoch 5 refused on an empty fence table")
	}
	if err := first.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	a := fenceAt(t, pool, 5, true)
	if a.refused(t) {
		t.Fatal("slice a at epoch 5 refused")
	}
	b := fenceAt(t, pool, 5, true)
	if b.blocked(t, pool) {
		t.Fatal("slice b at epoch 5 waits for slice a's fence lock; want the row shared")
	}
	if b.refused(t) {
		t.Fatal("slice b at epoch 5 refused")
	}

	newer := fenceAt(t, pool, 6, false)
	if !newer.blocked(t, pool) {
		t.Fatalf("epoch 6 fenced (%v) while slices of epoch 5 hold the row; want it to wait for them", newer.result(t))
	}
	for _, s := range []*fencing{a, b} {
		if err := s.tx.Commit(ctx); err != nil {
			t.Fatalf("a slice of epoch 5 commits before epoch 6: %v", err)
		}
	}
	if newer.refused(t) {
		t.Fatal("epoch 6 refused after the slices of epoch 5 ended")
	}
	stale := fenceAt(t, pool, 5, true) // locks the row after epoch 6 wrote it, before its commit
	if !stale.blocked(t, pool) {
		t.Fatalf("epoch 5 fenced (%v) while epoch 6 holds the row; want it to wait", stale.result(t))
	}
	if err := newer.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !stale.refused(t) {
		t.Fatal("epoch 5 passed its fence after epoch 6 committed")
	}
	for _, held := range []bool{true, false} {
		if !fenceAt(t, pool, 5, held).refused(t) {
			t.Fatalf("epoch 5 (held %v) passed its fence after epoch 6 committed", held)
		}
	}
	if e := queryInt(t, pool, `SELECT epoch FROM shardflow_fence WHERE job = 'job' AND item = 0`); e != 6 {
		t.Fatalf("fence epoch = %d; want 6", e)
	}
}

// TestTransactionalCommitsShareTheFenceRowOfTheirEpoch: once a source has
// committed an item's epoch in shardflow_fence, its later commits at that
// epoch lock the row FOR SHARE and write no version of it (so the slices
// of a batch do not wait for each other's commit). Fails while every
// commit writes the row (its xmin changes at every batch).
func TestTransactionalCommitsShareTheFenceRowOfTheirEpoch(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 50)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 4)
	version := func() int64 {
		return queryInt(t, pool, `SELECT xmin::text::bigint FROM shardflow_fence WHERE job = 'job' AND item = 0 AND epoch = 4`)
	}
	var first int64
	for i := range 5 {
		got, err := job.Fetch(ctx, sh)
		if err != nil || len(got) != 10 {
			t.Fatalf("Fetch %d = %d, %v", i, len(got), err)
		}
		if n, err := job.ProcessBatch(ctx, sh, got); n != 10 || err != nil {
			t.Fatalf("ProcessBatch %d = %d, %v", i, n, err)
		}
		if i == 0 {
			first = version()
		} else if v := version(); v != first {
			t.Fatalf("batch %d wrote the fence row of its epoch again (xmin %d, then %d)", i, first, v)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 50 {
		t.Fatalf("effects = %d; want 50", n)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

// countingDB is newDB's pool with its round trips counted (statements).
func countingDB(t *testing.T) (*pgxpool.Pool, *statements) {
	t.Helper()
	cfg := newDB(t).Config().Copy()
	count := &statements{}
	cfg.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, count
}

// TestTransactionalBatchRoundTrips: a transactional batch makes 2 round
// trips to Postgres, its Fetch included, once the source has fenced once:
// BEGIN with the statement that reads, locks and marks the batch's rows
// (the Fetch's, once the item's batches are seen to arrive whole; before
// that, a read, then BEGIN with the lock and mark); the fence row and
// COMMIT in the other. The job's own statements aside. Fails
// with a round trip per statement (5: fetch, begin, lock and mark, fence,
// commit).
func TestTransactionalBatchRoundTrips(t *testing.T) {
	pool, count := countingDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 40)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 2)
	var trips []int64
	for {
		before := count.n.Load()
		got, err := job.Fetch(ctx, sh)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if n, err := job.ProcessBatch(ctx, sh, got); n != len(got) || err != nil {
			t.Fatalf("ProcessBatch = %d, %v", n, err)
		}
		trips = append(trips, count.n.Load()-before-1) // the effects' COPY: 1
	}
	if len(trips) != 4 {
		t.Fatalf("%d batches, want 4", len(trips))
	}
	// The first: its Fetch, then the fence row on its own (the source does
	// not know yet whether a coordination guard fences it).
	if trips[0] != 4 {
		t.Errorf("first batch: %d round trips, want 4 (fetch, begin with the lock and the next fetch, fence, commit)", trips[0])
	}
	for i, n := range trips[1:] {
		if n != 2 {
			t.Errorf("batch %d: %d round trips, want 2 (begin with the read, lock and mark; fence with the commit)", i+2, n)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 40 {
		t.Fatalf("effects = %d; want 40", n)
	}
	if e := queryInt(t, pool, `SELECT epoch FROM shardflow_fence WHERE job = 'job' AND item = 0`); e != 2 {
		t.Fatalf("fence epoch = %d; want 2", e)
	}
}

// TestTransactionalFenceLostBeforeTheCommitRollsBack: a newer epoch that
// commits its fence row after a batch's ownership check, before the batch's
// commit round trip (which writes the batch's fence row and commits),
// makes the fence in that round trip fail: the COMMIT is not run, the
// batch's effects and done marks roll back, and the pool stays usable.
// Fails if the commit round trip commits whatever its fence statement
// found.
func TestTransactionalFenceLostBeforeTheCommitRollsBack(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 30)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 3)
	batch := func(sh dataflowShard) (int, error) {
		t.Helper()
		got, err := job.Fetch(ctx, sh)
		if err != nil || len(got) != 10 {
			t.Fatalf("Fetch = %d, %v", len(got), err)
		}
		return job.ProcessBatch(ctx, sh, got)
	}
	if n, err := batch(sh); n != 10 || err != nil { // the source learns it fences without a guard
		t.Fatalf("first batch = %d, %v", n, err)
	}
	defer postgres.SetAfterFence(func() {
		// The owner at epoch 7 commits, between this batch's check and its
		// commit. (Were the fence row locked by the batch, the write would
		// wait for a batch waiting for it: lock_timeout ends that.)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE shardflow_fence SET epoch = 7 WHERE job = 'job' AND item = 0`)
			return err
		})
		if err != nil {
			t.Fatalf("the owner at epoch 7 could not commit its fence row: %v", err)
		}
	})()
	n, err := batch(sh)
	if !errors.Is(err, postgres.ErrFenced) || n != 0 {
		t.Fatalf("batch after a newer epoch committed = %d, %v; want 0, ErrFenced", n, err)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 10 {
		t.Fatalf("effects = %d; want 10 (the fenced batch's rolled back)", e)
	}
	if d := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`); d != 10 {
		t.Fatalf("done = %d; want 10 (the fenced batch's rows stay pending)", d)
	}
	if p := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending' AND shardflow_attempts = 0`); p != 20 {
		t.Fatalf("pending untouched = %d; want 20", p)
	}
	postgres.SetAfterFence(nil)
	// The owner at epoch 7 drains the rest.
	for range 2 {
		if n, err := batch(shard(0, 1, 10, 7)); n != 10 || err != nil {
			t.Fatalf("batch at epoch 7 = %d, %v", n, err)
		}
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 30 {
		t.Fatalf("effects = %d; want 30", e)
	}
}

// TestTransactionalLaterRunReadsAfresh: rows a run read ahead (a batch
// its Fetch locked, or rows read for a later Fetch) are never handed to a
// later run, which reads afresh and sees the rows as they are then. Fails
// if rows read by a run outlive it (the later run would get the payload
// read by the earlier one).
func TestTransactionalLaterRunReadsAfresh(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 20)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 1)
	run1, end1 := context.WithCancel(testCtx(t))
	got, err := job.Fetch(run1, sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	if n, err := job.ProcessBatch(run1, sh, got); n != 10 || err != nil {
		t.Fatalf("ProcessBatch = %d, %v", n, err)
	}
	if got, err = job.Fetch(run1, sh); err != nil || len(got) != 10 { // read and locked, not processed
		t.Fatalf("second Fetch = %d, %v", len(got), err)
	}
	end1() // the run ends with its next batch read
	// Waits for the batch's rollback, if the run's end has not rolled it
	// back yet.
	exec(t, pool, `UPDATE orders SET payload = 'changed' WHERE shardflow_status = 'pending'`)
	got, err = job.Fetch(testCtx(t), sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch of the next run = %d, %v", len(got), err)
	}
	for _, r := range got {
		if r.Value.Payload != "changed" {
			t.Fatalf("row %d: payload %q read by the earlier run; want %q", r.Key, r.Value.Payload, "changed")
		}
	}
}

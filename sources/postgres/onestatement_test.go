package postgres_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/dataflow/dataflowtest"
	"github.com/shardflow/shardflow/sources/postgres"
)

// tableStatements counts the statements naming the work table "orders"
// (the source quotes it), sent alone or in a batch.
type tableStatements struct{ n atomic.Int64 }

func (c *tableStatements) count(sql string) {
	if strings.Contains(sql, `"orders"`) {
		c.n.Add(1)
	}
}
func (c *tableStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}
func (c *tableStatements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tableStatements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *tableStatements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}
func (c *tableStatements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestTransactionalBatchReadsLocksAndMarksInOneStatement: once an item's
// batches are seen to reach ProcessBatch whole, each batch's rows are read,
// locked and marked done by one statement on the work table, its Fetch's,
// in the batch's transaction. Fails with the two-pass path (2: the read,
// then the lock and mark by key).
func TestTransactionalBatchReadsLocksAndMarksInOneStatement(t *testing.T) {
	cfg := newDB(t).Config().Copy()
	count := &tableStatements{}
	cfg.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := testCtx(t)
	newOrders(t, pool, 50)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 2)
	var perBatch []int64
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
		perBatch = append(perBatch, count.n.Load()-before)
	}
	if len(perBatch) != 5 {
		t.Fatalf("%d batches, want 5", len(perBatch))
	}
	// The first batch shows the shape: read, then locked and marked.
	for i, n := range perBatch[1:] {
		if n != 1 {
			t.Errorf("batch %d: %d statements on the work table, want 1 (read, lock and mark in one)", i+2, n)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 50 {
		t.Fatalf("effects = %d; want 50", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_attempts = 1 AND shardflow_claim_epoch = 2`); n != 50 {
		t.Fatalf("rows done at their first attempt at epoch 2 = %d; want 50", n)
	}
}

// TestTransactionalFetchLocksItsRowsUntilItsBatchEnds: a batch fetched in
// one statement holds its rows locked from its Fetch (another connection
// cannot lock them, so another owner skips them), and when its run ends
// before ProcessBatch gets it, the rows go back to pending untouched and
// the item's next run processes them once. Fails with the two-pass path,
// whose Fetch locks nothing.
func TestTransactionalFetchLocksItsRowsUntilItsBatchEnds(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 30)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 1)
	run1, end1 := context.WithCancel(testCtx(t))
	defer end1()
	got, err := job.Fetch(run1, sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	if n, err := job.ProcessBatch(run1, sh, got); n != 10 || err != nil {
		t.Fatalf("ProcessBatch = %d, %v", n, err)
	}
	got, err = job.Fetch(run1, sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("second Fetch = %d, %v", len(got), err)
	}
	ks := make([]int64, len(got))
	for i, r := range got {
		ks[i] = r.Key
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM (SELECT 1 FROM orders WHERE id = ANY($1) FOR UPDATE SKIP LOCKED) l`, ks); n != 0 {
		t.Fatalf("%d of the fetched rows lockable by another connection; want 0 (locked from the Fetch)", n)
	}
	end1() // the run ends with the batch fetched, not processed
	// The item's next run: its ProcessBatch of a row of that batch waits
	// for the rollback, so nothing is skipped as another owner's.
	run2 := testCtx(t)
	total := 0
	for {
		got, err := job.Fetch(run2, sh)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		n, err := job.ProcessBatch(run2, sh, got)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 20 {
		t.Fatalf("the next run processed %d rows; want 20", total)
	}
	effectsOnceAtFirstAttempt(t, pool, 30, " (the rolled-back batch's attempts undone)")
}

// TestTransactionalBatchInSlicesFallsBack: a batch fetched in one
// statement that reaches ProcessBatch in slices (several workers) is
// rolled back by the first slice, the others wait for that, and every
// slice then commits by the two-pass path: each row once, none skipped as
// another owner's, attempts counted once.
func TestTransactionalBatchInSlicesFallsBack(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 40)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	sh := shard(0, 1, 10, 1)
	got, err := job.Fetch(ctx, sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	if n, err := job.ProcessBatch(ctx, sh, got); n != 10 || err != nil { // whole: the next Fetch locks
		t.Fatalf("ProcessBatch = %d, %v", n, err)
	}
	if got, err = job.Fetch(ctx, sh); err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	var wg sync.WaitGroup
	var done atomic.Int64
	for _, part := range [][]postgres.Row[Order]{got[:3], got[3:6], got[6:]} {
		wg.Go(func() {
			n, err := job.ProcessBatch(ctx, sh, part)
			if err != nil {
				t.Errorf("ProcessBatch of a slice = %d, %v", n, err)
			}
			done.Add(int64(n))
		})
	}
	wg.Wait()
	if done.Load() != 10 {
		t.Fatalf("slices succeeded %d; want 10", done.Load())
	}
	// The item's batches now go the two-pass way; the rest drains.
	for {
		got, err := job.Fetch(ctx, sh)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, part := range [][]postgres.Row[Order]{got[:len(got)/2], got[len(got)/2:]} {
			if n, err := job.ProcessBatch(ctx, sh, part); n != len(part) || err != nil {
				t.Fatalf("ProcessBatch = %d, %v", n, err)
			}
		}
	}
	effectsOnceAtFirstAttempt(t, pool, 40, "")
}

// lockStatements counts the statements that lock rows of "orders" (FOR
// UPDATE SKIP LOCKED): byKey, a slice's lock of the keys it was handed (the
// two-pass path; the keys its first argument), and inFetch, a Fetch's
// read, lock and mark in one statement.
type lockStatements struct {
	tableStatements
	byKey, inFetch atomic.Int64
}

func (c *lockStatements) count(sql string, args []any) {
	if !strings.Contains(sql, `"orders"`) || !strings.Contains(sql, "SKIP LOCKED") || len(args) == 0 {
		return
	}
	if _, keys := args[0].([]int64); keys {
		c.byKey.Add(1)
	} else {
		c.inFetch.Add(1)
	}
}
func (c *lockStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL, d.Args)
	return ctx
}
func (c *lockStatements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL, d.Args)
}

// TestTransactionalSlicesLockedByTheirFetch: with several workers per item
// the engine cuts each batch where its Fetch cut it (dataflow.BatchSlicer),
// and the Fetch reads, locks and marks each slice's rows in one statement
// of that slice's own transaction, which the slice's ProcessBatch commits:
// no slice locks its rows again by key. Every row's effect once, at its
// first attempt. Fails with the two-pass path (each slice's lock by key).
func TestTransactionalSlicesLockedByTheirFetch(t *testing.T) {
	cfg := newDB(t).Config().Copy()
	cfg.MaxConns = 16 // 3 items x 4 slices, their Fetch's included
	locks := &lockStatements{}
	cfg.ConnConfig.Tracer = locks
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := testCtx(t)
	const rows = 3000
	newOrders(t, pool, rows)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	jcfg := dataflow.JobConfig{JobName: "job", ShardingTotalCount: 3, FetchDataCount: 100, StreamingProcess: true,
		ConcurrentDataProcessThreadCount: 4}
	res, err := dataflowtest.RunBatch(ctx, jcfg, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.Success != rows || res.Failure != 0 {
		t.Fatalf("run: %d/%d; want %d/0", res.Success, res.Failure, rows)
	}
	effectsOnceAtFirstAttempt(t, pool, rows, "")
	if n := locks.byKey.Load(); n != 0 {
		t.Errorf("%d slices locked their rows again by key (the two-pass path); want 0", n)
	}
	// 3 items x 10 batches of 4 slices each, a statement each, and a
	// statement finding nothing at each item's end.
	if n := locks.inFetch.Load(); n < 3*rows/100 {
		t.Errorf("%d Fetch statements locked rows; want at least %d (one a slice)", n, 3*rows/100)
	}
}

// TestTransactionalEngineRunsExactlyOnce: the transactional mode under the
// pipeline engine, one worker per item (each batch whole: read, locked
// and marked by its Fetch), several workers (slices: the two-pass path),
// and pipelined fetching (a Fetch while the item's previous batch runs):
// every row's effect once.
func TestTransactionalEngineRunsExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threads   int
		pipelined bool
	}{{"one worker", 1, false}, {"four workers", 4, false}, {"pipelined", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := newDB(t)
			ctx := testCtx(t)
			newOrders(t, pool, 300)
			exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
			job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
			cfg := dataflow.JobConfig{JobName: "job", ShardingTotalCount: 3, FetchDataCount: 16, StreamingProcess: true,
				ConcurrentDataProcessThreadCount: tc.threads, PipelinedFetch: tc.pipelined}
			res, err := dataflowtest.RunBatch(ctx, cfg, job)
			if err != nil {
				t.Fatal(err)
			}
			// Pipelined, a Fetch that rescans from the range start reads
			// rows the item's previous batch still holds; its slice skips
			// them (dataflow.Skipped): they count where they are
			// processed, so each row counts once.
			if res.Success != 300 || res.Failure != 0 {
				t.Fatalf("run: %d/%d; want 300/0", res.Success, res.Failure)
			}
			effectsOnceAtFirstAttempt(t, pool, 300, "")
		})
	}
}

// effectsOnceAtFirstAttempt fails t unless want rows have their effect
// exactly once and are done at their first attempt (note: why, if any).
func effectsOnceAtFirstAttempt(t *testing.T, pool *pgxpool.Pool, want int64, note string) {
	t.Helper()
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != want {
		t.Fatalf("effects = %d; want %d", n, want)
	}
	if n := queryInt(t, pool, `SELECT count(DISTINCT order_id) FROM effects`); n != want {
		t.Fatalf("distinct effects = %d; want %d", n, want)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_attempts = 1`); n != want {
		t.Fatalf("rows done at their first attempt = %d; want %d%s", n, want, note)
	}
}

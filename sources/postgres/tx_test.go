package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sources/postgres"
)

// writeEffects inserts one effects row per order with tx.
func writeEffects(_ context.Context, tx pgx.Tx, _ dataflowShard, items []Order) error {
	rows := make([][]any, len(items))
	for i, o := range items {
		rows[i] = []any{o.ID}
	}
	_, err := tx.CopyFrom(context.Background(), pgx.Identifier{"effects"}, []string{"order_id"}, pgx.CopyFromRows(rows))
	return err
}

func TestTransactionalCommitsEffectsAndDoneMarksTogether(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 1000)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	for item := range 3 {
		for {
			got, err := job.Fetch(ctx, shard(item, 3, 128, 4))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			if n, err := job.ProcessBatch(ctx, shard(item, 3, 128, 4), got); err != nil || n != len(got) {
				t.Fatalf("ProcessBatch = %d, %v", n, err)
			}
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_claim_epoch = 4`); n != 1000 {
		t.Fatalf("done = %d; want 1000", n)
	}
	if n := queryInt(t, pool, `SELECT count(DISTINCT order_id) FROM effects`); n != 1000 {
		t.Fatalf("distinct effects = %d; want 1000", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 1000 {
		t.Fatalf("effects = %d; want 1000 (no duplicate)", n)
	}
	if e := queryInt(t, pool, `SELECT max(epoch) FROM shardflow_fence WHERE job = 'job'`); e != 4 {
		t.Fatalf("fence epoch = %d; want 4", e)
	}
}

func TestTransactionalFencingRefusesAStaleEpoch(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 10)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	got, err := job.Fetch(ctx, shard(0, 1, 10, 3))
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	// A newer owner (epoch 5) has committed for this item meanwhile.
	exec(t, pool, `INSERT INTO shardflow_fence VALUES ('job', 0, 5)`)
	n, err := job.ProcessBatch(ctx, shard(0, 1, 10, 3), got)
	if !errors.Is(err, postgres.ErrFenced) || n != 0 {
		t.Fatalf("ProcessBatch = %d, %v; want 0, ErrFenced", n, err)
	}
	if !strings.Contains(err.Error(), "epoch 3") {
		t.Errorf("error %q does not name the stale epoch", err)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 0 {
		t.Fatalf("effects = %d; want 0 after the rollback", e)
	}
	if p := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending' AND shardflow_attempts = 0`); p != 10 {
		t.Fatalf("pending = %d; want 10, untouched", p)
	}
	// The coordination check refuses too, even when the database fence would pass.
	lost := errors.New("session expired")
	s := shard(0, 1, 10, 9).WithFence(func(context.Context) error { return lost })
	if n, err := job.ProcessBatch(ctx, s, got); !errors.Is(err, postgres.ErrFenced) || !errors.Is(err, lost) || n != 0 {
		t.Fatalf("ProcessBatch with lost ownership = %d, %v; want 0, ErrFenced wrapping it", n, err)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 0 {
		t.Fatalf("effects = %d; want 0", e)
	}
	// The owner at epoch 5 commits.
	if n, err := job.ProcessBatch(ctx, shard(0, 1, 10, 5), got); err != nil || n != 10 {
		t.Fatalf("ProcessBatch at epoch 5 = %d, %v", n, err)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 10 {
		t.Fatalf("effects = %d; want 10", e)
	}
}

func TestTransactionalOverlappingOwnersProduceNoDuplicateEffects(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 2000)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	// Two servers both believe they own item 0 at the same epoch and race
	// on the same fetched rows, each with 4 concurrent slices.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, id := range []string{"a", "b"} {
		job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
		wg.Go(func() {
			for {
				got, err := job.Fetch(ctx, on(id, shard(0, 1, 200, 1)))
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				var inner sync.WaitGroup
				for part := range 4 {
					slice := got[part*len(got)/4 : (part+1)*len(got)/4]
					inner.Go(func() {
						// Rows the other server holds or did are skipped
						// (dataflow.Skipped): its work, not a failure.
						var skipped *dataflow.Skipped
						if _, err := job.ProcessBatch(ctx, on(id, shard(0, 1, 200, 1)), slice); err != nil && !errors.As(err, &skipped) {
							errs <- err
						}
					})
				}
				inner.Wait()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 2000 {
		t.Fatalf("effects = %d; want 2000", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM (SELECT order_id FROM effects GROUP BY order_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d orders have duplicate effects", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status <> 'done'`); n != 0 {
		t.Fatalf("%d rows not done", n)
	}
}

func TestTransactionalPoisonRowFailsAndTheOthersCommit(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 40)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{MaxAttempts: 3}).Transactional(
		func(ctx context.Context, tx pgx.Tx, s dataflowShard, items []Order) error {
			for _, o := range items {
				if o.ID == 23 {
					return errors.New("order 23: negative amount")
				}
			}
			return writeEffects(ctx, tx, s, items)
		})
	var succeeded int
	for range 20 {
		got, err := job.Fetch(ctx, shard(0, 1, 16, 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		n, err := job.ProcessBatch(ctx, shard(0, 1, 16, 1), got)
		if err != nil {
			t.Fatal(err)
		}
		succeeded += n
	}
	if succeeded != 39 {
		t.Fatalf("succeeded = %d; want 39", succeeded)
	}
	var status, lastErr string
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT shardflow_status, shardflow_attempts, shardflow_last_error FROM orders WHERE id = 23`).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || attempts != 3 || !strings.Contains(lastErr, "negative amount") {
		t.Fatalf("poison row = %s, %d attempts, %q; want failed, 3, its error", status, attempts, lastErr)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 39 {
		t.Fatalf("effects = %d; want 39", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM effects WHERE order_id = 23`); n != 0 {
		t.Fatalf("the poison row has %d effects; want 0", n)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/sources/postgres"
)

func TestClaimGivesEachItemDisjointRowsOfItsBuckets(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	const rows, total = 5000, 4
	newOrders(t, pool, rows)
	src := newSource(t, pool, postgres.Config{})
	job := src.Claim(func(context.Context, dataflowShard, Order) error { return nil })
	seen := map[int64]int{}
	for item := range total {
		lo, hi, _ := postgres.BucketRange(item, total)
		for {
			got, err := job.Fetch(ctx, shard(item, total, 300, 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			for _, r := range got {
				if prev, dup := seen[r.Key]; dup {
					t.Fatalf("row %d claimed by items %d and %d", r.Key, prev, item)
				}
				seen[r.Key] = item
				if b := int(((r.Key % 1024) + 1024) % 1024); b < lo || b > hi {
					t.Fatalf("item %d got row %d of bucket %d outside [%d, %d]", item, r.Key, b, lo, hi)
				}
				if r.Value.ID != r.Key || r.Value.Payload == "" {
					t.Fatalf("row %d scanned as %+v", r.Key, r.Value)
				}
			}
			if n, err := job.ProcessBatch(ctx, shard(item, total, 300, 1), got); err != nil || n != len(got) {
				t.Fatalf("ProcessBatch = %d, %v; want %d, nil", n, err, len(got))
			}
		}
	}
	if len(seen) != rows {
		t.Fatalf("claimed %d distinct rows; want %d", len(seen), rows)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_claimed_by = 's' AND shardflow_attempts = 1`); n != rows {
		t.Fatalf("done rows = %d; want %d", n, rows)
	}
}

func TestClaimSkipsRowsLockedByAnotherClaimer(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 100)
	a := newSource(t, pool, postgres.Config{}).Claim(nil)
	// Another transaction (an overlapping owner) holds rows 1..10.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT id FROM orders WHERE id <= 10 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	got, err := a.Fetch(ctx, shard(0, 1, 1000, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 90 {
		t.Fatalf("claimed %d rows while 10 are locked; want 90", len(got))
	}
	for _, r := range got {
		if r.Key <= 10 {
			t.Fatalf("claimed locked row %d", r.Key)
		}
	}
}

func TestClaimDoneMarksAreGuardedByTheClaim(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 50)
	var staleRan, freshRan int
	stale := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { staleRan++; return nil })
	fresh := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { freshRan++; return nil })

	onOld, onNew := on("old", shard(0, 1, 100, 1)), on("new", shard(0, 1, 100, 2))
	oldRows, err := stale.Fetch(ctx, onOld)
	if err != nil || len(oldRows) != 50 {
		t.Fatalf("stale Fetch = %d rows, %v", len(oldRows), err)
	}
	// The item moves to "new" at epoch 2: its first fetch reclaims the old claims.
	newRows, err := fresh.Fetch(ctx, onNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(newRows) != 50 {
		t.Fatalf("new owner claimed %d rows; want the 50 reclaimed ones", len(newRows))
	}
	// The stale claimer finishes late: its marks must change nothing.
	if _, err := stale.ProcessBatch(ctx, onOld, oldRows); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'claimed' AND shardflow_claimed_by = 'new' AND shardflow_claim_epoch = 2`); n != 50 {
		t.Fatalf("rows still claimed by the new owner = %d; want 50", n)
	}
	if n, err := fresh.ProcessBatch(ctx, onNew, newRows); err != nil || n != 50 {
		t.Fatalf("fresh ProcessBatch = %d, %v", n, err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_claimed_by = 'new'`); n != 50 {
		t.Fatalf("done by the new owner = %d; want 50", n)
	}
	if staleRan != 50 || freshRan != 50 {
		t.Fatalf("ran stale %d, fresh %d; want 50 and 50 (claim mode is at least once)", staleRan, freshRan)
	}
}

func TestClaimReclaimsAnExpiredLeaseOfTheSameServer(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 20)
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { return nil })
	first, err := job.Fetch(ctx, shard(0, 1, 100, 7))
	if err != nil || len(first) != 20 {
		t.Fatalf("Fetch = %d, %v", len(first), err)
	}
	// Same server and epoch, claims within the lease: nothing to fetch.
	if again, err := job.Fetch(ctx, shard(0, 1, 100, 7)); err != nil || len(again) != 0 {
		t.Fatalf("Fetch within the lease = %d rows, %v; want 0", len(again), err)
	}
	// Age half the claims past the 5m default lease (the process "died").
	exec(t, pool, `UPDATE orders SET shardflow_claimed_at = now() - interval '6 minutes' WHERE id <= 10`)
	again, err := job.Fetch(ctx, shard(0, 1, 100, 7))
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 10 {
		t.Fatalf("reclaimed %d rows after the lease; want 10", len(again))
	}
	for _, r := range again {
		if r.Key > 10 {
			t.Fatalf("reclaimed row %d whose lease is live", r.Key)
		}
	}
	if n := queryInt(t, pool, `SELECT max(shardflow_attempts) FROM orders`); n != 2 {
		t.Fatalf("max attempts = %d; want 2 after one reclaim", n)
	}
}

func TestClaimPoisonRowFailsAfterMaxAttemptsAndOthersGoOn(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 30)
	calls := map[int64]int{}
	job := newSource(t, pool, postgres.Config{MaxAttempts: 3}).Claim(
		func(_ context.Context, _ dataflowShard, o Order) error {
			calls[o.ID]++
			if o.ID == 17 {
				return errors.New("cannot settle order 17: currency XXX")
			}
			return nil
		})
	for range 10 {
		got, err := job.Fetch(ctx, shard(0, 1, 8, 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if _, err := job.ProcessBatch(ctx, shard(0, 1, 8, 1), got); err != nil {
			t.Fatal(err)
		}
	}
	if calls[17] != 3 {
		t.Fatalf("poison row processed %d times; want MaxAttempts = 3", calls[17])
	}
	var status, lastErr string
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT shardflow_status, shardflow_attempts, shardflow_last_error FROM orders WHERE id = 17`).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || attempts != 3 || !strings.Contains(lastErr, "currency XXX") {
		t.Fatalf("poison row = %s, %d attempts, %q; want failed, 3, the error", status, attempts, lastErr)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`); n != 29 {
		t.Fatalf("done rows = %d; want 29", n)
	}
}

func TestClaimReleasesUnprocessedRowsOnCancel(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 10)
	ctx, cancel := context.WithCancel(testCtx(t))
	processed := 0
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error {
		processed++
		if processed == 4 {
			cancel() // ownership lost mid-batch
		}
		return nil
	})
	got, err := job.Fetch(ctx, shard(0, 1, 10, 1))
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	n, err := job.ProcessBatch(ctx, shard(0, 1, 10, 1), got)
	if err != nil || n != 4 {
		t.Fatalf("ProcessBatch = %d, %v; want 4, nil", n, err)
	}
	if d := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`); d != 4 {
		t.Fatalf("done = %d; want 4", d)
	}
	if p := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending' AND shardflow_attempts = 0 AND shardflow_claimed_by IS NULL`); p != 6 {
		t.Fatalf("released = %d; want 6 pending with no attempt counted", p)
	}
}

func TestClaimFetchRefusesWhenOwnershipIsLost(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 10)
	job := newSource(t, pool, postgres.Config{}).Claim(nil)
	notOwner := errors.New("not owner")
	s := shard(0, 1, 10, 1).WithFence(func(context.Context) error { return notOwner })
	got, err := job.Fetch(testCtx(t), s)
	if !errors.Is(err, postgres.ErrFenced) || !errors.Is(err, notOwner) || len(got) != 0 {
		t.Fatalf("Fetch = %d rows, %v; want ErrFenced wrapping the ownership error", len(got), err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending'`); n != 10 {
		t.Fatalf("pending = %d; want 10 (nothing claimed)", n)
	}
}

// TestClaimDoneAfterTheJobUpdatedItsRow: the done mark finds a row by the
// ctid its claim returned, and by key when the job's function updated the
// row meanwhile (its version moved): every row ends done, none is left
// claimed for a reclaim to process again.
func TestClaimDoneAfterTheJobUpdatedItsRow(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 100)
	src := newSource(t, pool, postgres.Config{})
	job := src.Claim(func(ctx context.Context, _ dataflowShard, o Order) error {
		if o.ID%2 == 0 { // a business write to the row itself
			_, err := pool.Exec(ctx, `UPDATE orders SET payload = 'settled' WHERE id = $1`, o.ID)
			return err
		}
		return nil
	})
	sh := shard(0, 1, 100, 1)
	got, err := job.Fetch(ctx, sh)
	if err != nil || len(got) != 100 {
		t.Fatalf("Fetch: %d rows, %v", len(got), err)
	}
	if n, err := job.ProcessBatch(ctx, sh, got); n != 100 || err != nil {
		t.Fatalf("ProcessBatch: %d, %v", n, err)
	}
	if done := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`); done != 100 {
		t.Fatalf("%d rows done, want 100", done)
	}
	if settled := queryInt(t, pool, `SELECT count(*) FROM orders WHERE payload = 'settled'`); settled != 50 {
		t.Fatalf("%d rows settled, want 50", settled)
	}
}

// The claim mode claims an item's pending rows in key order (by the
// pending index, as the transactional mode reads), after its cursor: each
// fetch's keys ascend and start after the previous fetch's, the lowest key
// (math.MinInt64, in bucket 0) included; a row that goes back to pending
// behind the cursor is still claimed once a fetch after the cursor comes
// back short. Fails in (bucket, key) order ("not in key order").
func TestClaimFetchesInKeyOrderAndFindsRowsBehindItsCursor(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 3000)
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { return nil })
	drainInKeyOrder(t, pool, job, `UPDATE orders SET shardflow_status = 'pending', shardflow_claimed_by = NULL, shardflow_claim_epoch = NULL WHERE id = 1`)
}

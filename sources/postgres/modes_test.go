package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

func inRange(t *testing.T, item, total int, keys []int64) {
	t.Helper()
	lo, hi, _ := postgres.BucketRange(item, total)
	for _, k := range keys {
		if b := int(((k % 1024) + 1024) % 1024); b < lo || b > hi {
			t.Fatalf("item %d of %d got row %d of bucket %d outside [%d, %d]", item, total, k, b, lo, hi)
		}
	}
}

func TestTransactionalAndCheckpointFetchOnlyTheItemsBuckets(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 3000)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	txJob := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	exec(t, pool, `CREATE TABLE events (id bigint PRIMARY KEY, payload text NOT NULL)`)
	exec(t, pool, `INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, 3000) g`)
	spec := postgres.TableSpec{Table: "events", ReadOnly: true}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		t.Fatal(err)
	}
	cpJob := newSource(t, pool, postgres.Config{Table: spec}).Checkpoint(
		func(context.Context, pgx.Tx, dataflowShard, []Order) error { return nil })
	const total = 5
	seenTx, seenCp := map[int64]bool{}, map[int64]bool{}
	for item := range total {
		for _, run := range []struct {
			fetch func() ([]postgres.Row[Order], error)
			seen  map[int64]bool
		}{
			{func() ([]postgres.Row[Order], error) { return txJob.Fetch(ctx, shard(item, total, 5000, 1)) }, seenTx},
			{func() ([]postgres.Row[Order], error) { return cpJob.Fetch(ctx, shard(item, total, 5000, 1)) }, seenCp},
		} {
			got, err := run.fetch()
			if err != nil {
				t.Fatal(err)
			}
			ks := make([]int64, len(got))
			for i, r := range got {
				ks[i] = r.Key
				if run.seen[r.Key] {
					t.Fatalf("row %d fetched for two items", r.Key)
				}
				run.seen[r.Key] = true
			}
			inRange(t, item, total, ks)
		}
	}
	if len(seenTx) != 3000 || len(seenCp) != 3000 {
		t.Fatalf("fetched %d (transactional) and %d (checkpoint) distinct rows; want 3000 each", len(seenTx), len(seenCp))
	}
}

func TestClaimFindsAClaimAbandonedBehindItsCursor(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 100)
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { return nil })
	s := on("a", shard(0, 1, 10, 3))
	first, err := job.Fetch(ctx, s)
	if err != nil || len(first) != 10 {
		t.Fatalf("Fetch = %d, %v", len(first), err)
	}
	if _, err := job.ProcessBatch(ctx, s, first); err != nil {
		t.Fatal(err)
	}
	// Rows 1..10 (buckets 1..10) are done and the cursor is past them.
	// Row 5 now shows a claim by a server that overlapped with us and
	// died: behind the cursor, so only a sweep from the range start finds it.
	exec(t, pool, `UPDATE orders SET shardflow_status = 'claimed', shardflow_claimed_by = 'dead', shardflow_claim_epoch = 2, shardflow_claimed_at = now() WHERE id = 5`)
	for range 50 {
		got, err := job.Fetch(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if _, err := job.ProcessBatch(ctx, s, got); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_claimed_by = 'a' AND shardflow_claim_epoch = 3`); n != 100 {
		t.Fatalf("done by a at epoch 3 = %d; want 100, the dead server's claim reclaimed", n)
	}
}

// The transactional mode reads an item's pending rows in key order (by the
// pending index), after its cursor: each fetch's keys ascend and start
// after the previous fetch's, the lowest key (math.MinInt64, in bucket 0)
// included; a row that goes back to pending behind the cursor is still
// found once a fetch after the cursor comes back short.
func TestTransactionalFetchesInKeyOrderAndFindsRowsBehindItsCursor(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 3000)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	job := newSource(t, pool, postgres.Config{}).Transactional(writeEffects)
	drainInKeyOrder(t, pool, job, `UPDATE orders SET shardflow_status = 'pending' WHERE id = 1`)
	if n := queryInt(t, pool, `SELECT count(*) FROM effects WHERE order_id = 1`); n != 2 {
		t.Fatalf("row 1 has %d effects; want 2 (processed, requeued, processed again)", n)
	}
}

// batchJob is a mode's Fetch and ProcessBatch, as the engine calls them.
type batchJob interface {
	Fetch(ctx context.Context, shard dataflowShard) ([]postgres.Row[Order], error)
	ProcessBatch(ctx context.Context, shard dataflowShard, items []postgres.Row[Order]) (int, error)
}

// drainInKeyOrder adds the two lowest keys to orders (3,000 rows,
// newOrders, before the job's source was made), then drains item 0 of 2 through job, 100 rows a fetch, checking that
// each fetch's keys ascend and start after the previous fetch's (the
// lowest key, math.MinInt64 in bucket 0, first); after the third batch
// requeue puts row 1 (bucket 1, done in the first) back to pending behind
// the cursor, and one rescan must find it. Every row of the item ends
// done, each fetched once and row 1 twice.
func drainInKeyOrder(t *testing.T, pool *pgxpool.Pool, job batchJob, requeue string) {
	t.Helper()
	ctx := testCtx(t)
	exec(t, pool, `INSERT INTO orders (id, payload) VALUES (-9223372036854775808, 'min'), (-5, 'neg')`)
	sh := shard(0, 2, 100, 1)
	want := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_bucket BETWEEN 0 AND 511`)
	var last int64
	seen, batches, rescanned := 0, 0, false
	for {
		got, err := job.Fetch(ctx, sh)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		ks := make([]int64, len(got))
		for i, r := range got {
			ks[i] = r.Key
			if i > 0 && r.Key <= ks[i-1] {
				t.Fatalf("fetch %d: keys %d then %d: not in key order", batches, ks[i-1], r.Key)
			}
		}
		inRange(t, 0, 2, ks)
		if batches == 0 && ks[0] != -9223372036854775808 {
			t.Fatalf("first fetch starts at key %d; want math.MinInt64", ks[0])
		}
		if batches > 0 && ks[0] <= last {
			// Only the requeued row comes before the cursor, found by one
			// rescan from the range start.
			if rescanned || ks[0] != 1 {
				t.Fatalf("fetch %d starts at key %d, not after the previous fetch's last key %d", batches, ks[0], last)
			}
			rescanned = true
		}
		if n, err := job.ProcessBatch(ctx, sh, got); err != nil || n != len(got) {
			t.Fatalf("ProcessBatch = %d, %v", n, err)
		}
		seen += len(got)
		last = ks[len(ks)-1]
		batches++
		if batches == 3 {
			exec(t, pool, requeue)
			want++
		}
	}
	if !rescanned {
		t.Fatal("the requeued row was not found by a rescan")
	}
	if int64(seen) != want {
		t.Fatalf("fetched %d rows; want %d (the item's rows and the requeued one)", seen, want)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_bucket BETWEEN 0 AND 511 AND shardflow_status <> 'done'`); n != 0 {
		t.Fatalf("%d rows of the item not done", n)
	}
}

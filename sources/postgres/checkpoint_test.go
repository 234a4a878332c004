package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

func newEvents(t testing.TB, pool *pgxpool.Pool, n int) *postgres.Source[Order] {
	t.Helper()
	exec(t, pool, `CREATE TABLE events (id bigint PRIMARY KEY, payload text NOT NULL)`)
	exec(t, pool, `INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, $1::int) g`, n)
	spec := postgres.TableSpec{Table: "events", ReadOnly: true}
	if err := postgres.Migrate(context.Background(), pool, spec); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	return newSource(t, pool, postgres.Config{Table: spec})
}

// drain runs fetch/process rounds for item until a fetch is empty, with
// the batch split in slices processed concurrently as the Node does.
func drain(t testing.TB, job *postgres.CheckpointJob[Order], s dataflowShard, slices int) int {
	t.Helper()
	ctx := testCtx(t)
	total := 0
	for range 1000 {
		got, err := job.Fetch(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return total
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for p := range slices {
			part := got[p*len(got)/slices : (p+1)*len(got)/slices]
			wg.Go(func() {
				n, err := job.ProcessBatch(ctx, s, part)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	t.Fatal("drain did not end")
	return 0
}

func TestCheckpointReadsEachRowOnceAndResumes(t *testing.T) {
	pool := newDB(t)
	src := newEvents(t, pool, 3000)
	job := src.Checkpoint(writeEffects)
	const total = 3
	n := 0
	for item := range total {
		n += drain(t, job, shard(item, total, 256, 1), 4)
	}
	if n != 3000 {
		t.Fatalf("committed %d rows; want 3000", n)
	}
	// A new process (new job value) resumes at the checkpoints: nothing left.
	again := src.Checkpoint(writeEffects)
	for item := range total {
		if m := drain(t, again, shard(item, total, 256, 2), 2); m != 0 {
			t.Fatalf("item %d re-read %d rows after its checkpoint", item, m)
		}
	}
	// A resharding to 5 items keeps every bucket's position.
	for item := range 5 {
		if m := drain(t, again, shard(item, 5, 256, 3), 2); m != 0 {
			t.Fatalf("after resharding, item %d of 5 re-read %d rows", item, m)
		}
	}
	// Appended rows are read next time.
	exec(t, pool, `INSERT INTO events SELECT g, 'e' || g FROM generate_series(3001, 3100) g`)
	m := 0
	for item := range total {
		m += drain(t, again, shard(item, total, 256, 4), 2)
	}
	if m != 100 {
		t.Fatalf("read %d appended rows; want 100", m)
	}
	if d := queryInt(t, pool, `SELECT count(*) - count(DISTINCT order_id) FROM effects`); d != 0 {
		t.Fatalf("%d duplicate effects", d)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 3100 {
		t.Fatalf("effects = %d; want 3100", e)
	}
}

func TestCheckpointFencingRefusesAStaleEpoch(t *testing.T) {
	pool := newDB(t)
	src := newEvents(t, pool, 100)
	ctx := testCtx(t)
	job := src.Checkpoint(writeEffects)
	got, err := job.Fetch(ctx, shard(0, 1, 50, 1))
	if err != nil || len(got) != 50 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	exec(t, pool, `INSERT INTO shardflow_fence VALUES ('job', 0, 2)`)
	if n, err := job.ProcessBatch(ctx, shard(0, 1, 50, 1), got); !errors.Is(err, postgres.ErrFenced) || n != 0 {
		t.Fatalf("ProcessBatch = %d, %v; want 0, ErrFenced", n, err)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 0 {
		t.Fatalf("effects = %d; want 0", e)
	}
	if c := queryInt(t, pool, `SELECT count(*) FROM shardflow_checkpoint`); c != 0 {
		t.Fatalf("checkpoints = %d; want 0", c)
	}
}

func TestCheckpointDeadLettersAPoisonRow(t *testing.T) {
	pool := newDB(t)
	src := newEvents(t, pool, 30)
	calls := 0
	job := src.Checkpoint(func(ctx context.Context, tx pgx.Tx, s dataflowShard, items []Order) error {
		for _, o := range items {
			if o.ID == 12 {
				calls++
				return errors.New("event 12 is malformed")
			}
		}
		return writeEffects(ctx, tx, s, items)
	})
	n := drain(t, job, shard(0, 1, 10, 1), 1)
	if n != 29 {
		t.Fatalf("committed %d; want 29", n)
	}
	var errText string
	if err := pool.QueryRow(testCtx(t), `SELECT error FROM shardflow_dead_letter WHERE job = 'job' AND key = 12`).Scan(&errText); err != nil {
		t.Fatalf("dead letter of row 12: %v", err)
	}
	if errText != "event 12 is malformed" {
		t.Fatalf("dead letter error = %q", errText)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 29 {
		t.Fatalf("effects = %d; want 29", e)
	}
}

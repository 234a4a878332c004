package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sources/postgres"
)

type workRow struct {
	ID      int64  `db:"id"`
	Payload string `db:"payload"`
}

// benchShardflow drains the table with the claim mode (or, with tx, the
// transactional mode): two servers, each with its own Source (claimed_by)
// and its half of the items, each running the dataflow pipeline engine
// (streaming, --threads workers per item).
func benchShardflow(ctx context.Context, pool *pgxpool.Pool, n int64, items, batch int, tx bool) (result, error) {
	// Two Nodes in this process over one in-memory coordination server:
	// the real scheduler, coord protocol (resharding, running marks,
	// fencing checks through the store) and pipeline, without ZooKeeper's
	// network round trips.
	srv := memstore.NewServer()
	r, err := drainWith(ctx, pool, n, items, batch, tx, func(context.Context) (store.Store, error) { return srv.Connect(), nil })
	if err != nil {
		return result{}, err
	}
	r.name, r.note = "shardflow", "claim mode"
	if tx {
		r.name, r.note = "shardflow-tx", "transactional mode (each slice one transaction: its rows locked and marked done, the function, the fence; with one worker per item the batch's Fetch reads, locks and marks its rows in one statement of that transaction)"
	}
	r.note += fmt.Sprintf(", %d items over 2 dataflow.Nodes in one process on memstore (streaming, workers per item: %d), batch %d; %s%s", items, workersPerItem, batch, r.drainRate(), r.cpuNote)
	return r, nil
}

// benchShardflowPgCoord is the transactional mode coordinated by pgstore at
// coordDSN: in the work table's database (shared: each batch checks its
// ownership inside its own transaction) or in another database of the same
// server (each batch asks the store in a check of its own).
func benchShardflowPgCoord(ctx context.Context, pool *pgxpool.Pool, coordDSN string, n int64, items, batch int, shared bool) (result, error) {
	r, err := drainWith(ctx, pool, n, items, batch, true, func(ctx context.Context) (store.Store, error) {
		return pgstore.Open(ctx, pgstore.Config{DSN: coordDSN})
	})
	if err != nil {
		return result{}, err
	}
	r.name, r.note = "shardflow-tx-pgcoord", "transactional mode coordinated by pgstore in another database of the server (a separate ownership check per batch)"
	if shared {
		r.name, r.note = "shardflow-tx-shared", "transactional mode coordinated by pgstore in the same database (ownership checked in each batch's transaction)"
	}
	r.note += fmt.Sprintf(", %d items over 2 dataflow.Nodes in one process (streaming, workers per item: %d), batch %d; %s%s", items, workersPerItem, batch, r.drainRate(), r.cpuNote)
	return r, nil
}

// drainWith drains the table with the claim mode (or, with tx, the
// transactional mode) on two Nodes whose stores open opens.
func drainWith(ctx context.Context, pool *pgxpool.Pool, n int64, items, batch int, tx bool, open func(context.Context) (store.Store, error)) (result, error) {
	if err := seedWork(ctx, pool, n); err != nil {
		return result{}, err
	}
	var jobs []dataflow.BatchJob[postgres.Row[workRow]]
	for range 2 { // one source per server; claimed_by is each Node's Shard.ServerID
		src, err := postgres.NewSource[workRow](ctx, postgres.Config{Pool: pool,
			Table: postgres.TableSpec{Table: "work", Columns: []string{"id", "payload"}}})
		if err != nil {
			return result{}, err
		}
		if tx {
			jobs = append(jobs, src.Transactional(func(context.Context, pgx.Tx, dataflow.Shard, []workRow) error { return nil }))
		} else {
			jobs = append(jobs, src.Claim(func(context.Context, dataflow.Shard, workRow) error { return nil }))
		}
	}
	var counted, firstFetch atomic.Int64
	done := make(chan struct{})
	var closeOnce sync.Once
	cfg := dataflow.JobConfig{JobName: "bench", ShardingTotalCount: items, FetchDataCount: batch,
		ConcurrentDataProcessThreadCount: workersPerItem, StreamingProcess: true}
	var nodes []*dataflow.Node
	var stores []interface{ Close() error }
	defer func() {
		for _, nd := range nodes {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = nd.Stop(sctx)
			cancel()
		}
		for _, st := range stores {
			_ = st.Close()
		}
	}()
	for i, job := range jobs {
		st, err := open(ctx)
		if err != nil {
			return result{}, err
		}
		stores = append(stores, st)
		nd, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, ServerID: fmt.Sprintf("server-%c", 'a'+i)})
		if err != nil {
			return result{}, err
		}
		nodes = append(nodes, nd)
		counting := countingJob{BatchJob: job, n: &counted, want: n, first: &firstFetch, done: func() { closeOnce.Do(func() { close(done) }) }}
		if err := dataflow.AddBatchJob[postgres.Row[workRow]](ctx, nd, cfg, counting); err != nil {
			return result{}, err
		}
	}
	mode := "claim mode"
	if tx {
		mode = "transactional mode"
	}
	cpu := pgCPU(mode, n)
	start := time.Now()
	for _, nd := range nodes {
		if err := nd.Start(ctx); err != nil {
			return result{}, err
		}
		if err := nd.TriggerLocal("bench"); err != nil {
			return result{}, err
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Minute):
		return result{}, fmt.Errorf("not done after 30m: %d of %d rows", counted.Load(), n)
	}
	elapsed, cpuNote := time.Since(start), cpu()
	d, err := countDone(ctx, pool)
	if err != nil {
		return result{}, err
	}
	if d != n {
		return result{}, fmt.Errorf("done %d; want %d", d, n)
	}
	startup := time.Duration(firstFetch.Load() - start.UnixNano())
	return result{rows: n, elapsed: elapsed, startup: startup, cpuNote: cpuNote}, nil
}

// benchPgxLoop is what one would write by hand: one goroutine per item
// claiming a batch with the textbook queue statement (SKIP LOCKED, the
// locked rows joined back by key) and marking it done with a guarded
// UPDATE by key. The claim mode joins back by ctid and marks done by ctid
// (a TID scan instead of an index descent per row).
func benchPgxLoop(ctx context.Context, pool *pgxpool.Pool, n int64, items, batch int) (result, error) {
	if err := seedWork(ctx, pool, n); err != nil {
		return result{}, err
	}
	const claim = `WITH c AS (
  SELECT id FROM work WHERE shardflow_status = 'pending' AND shardflow_bucket BETWEEN $1 AND $2 AND (shardflow_bucket, id) > ($6::smallint, $7::bigint)
  ORDER BY shardflow_status, shardflow_bucket, id LIMIT $3 FOR UPDATE SKIP LOCKED)
UPDATE work AS t SET shardflow_status = 'claimed', shardflow_claimed_by = $4, shardflow_claim_epoch = $5, shardflow_claimed_at = now(), shardflow_attempts = t.shardflow_attempts + 1
FROM c WHERE t.id = c.id
RETURNING t.id, t.payload`
	const done = `UPDATE work AS t SET shardflow_status = 'done', shardflow_last_error = NULL
WHERE t.id = ANY($1::bigint[]) AND t.shardflow_status = 'claimed' AND t.shardflow_claimed_by = $2 AND t.shardflow_claim_epoch = $3`
	cpu := pgCPU("pgx loop", n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, items)
	for item := range items {
		lo, hi, _ := postgres.BucketRange(item, items)
		me := fmt.Sprintf("server-%d", item%2)
		wg.Go(func() {
			// The same keyset cursor as the claim mode: start after the
			// last claimed (bucket, id); rescan from the start when short.
			after, afterID := int16(-1), int64(math.MinInt64)
			for {
				rows, err := pool.Query(ctx, claim, lo, hi, batch, me, 1, after, afterID)
				if err != nil {
					errs[item] = err
					return
				}
				got, err := pgx.CollectRows(rows, pgx.RowToStructByName[workRow])
				if err != nil {
					errs[item] = err
					return
				}
				if len(got) == 0 {
					if after == -1 {
						return
					}
					after, afterID = -1, math.MinInt64
					continue
				}
				ids := make([]int64, len(got))
				for i, r := range got {
					ids[i] = r.ID
					if b := int16(((r.ID % 1024) + 1024) % 1024); b > after || (b == after && r.ID > afterID) {
						after, afterID = b, r.ID
					}
				}
				if _, err := pool.Exec(ctx, done, ids, me, 1); err != nil {
					errs[item] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, cpuNote := time.Since(start), cpu()
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	d, err := countDone(ctx, pool)
	if err != nil || d != n {
		return result{}, fmt.Errorf("done %d, %v; want %d", d, err, n)
	}
	return result{name: "pgx", rows: n, elapsed: elapsed, note: fmt.Sprintf("hand-written loop, %d goroutines, the textbook claim (SKIP LOCKED, joined back by key, with the keyset cursor) and done-by-key SQL, batch %d%s", items, batch, cpuNote)}, nil
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// benchRiver inserts n no-op jobs with InsertManyFast (COPY) and times a
// river client working them off.
func benchRiver(ctx context.Context, pool *pgxpool.Pool, n int64, maxWorkers int) (result, error) {
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return result{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return result{}, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
	})
	if err != nil {
		return result{}, err
	}
	insertStart := time.Now()
	const chunk = 10_000
	params := make([]river.InsertManyParams, chunk)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	for left := n; left > 0; left -= chunk {
		if _, err := client.InsertManyFast(ctx, params[:min(left, chunk)]); err != nil {
			return result{}, err
		}
	}
	insert := time.Since(insertStart)
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return result{}, err
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 200_000})
	defer cancel()
	cpu := pgCPU("river", n)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	var completed int64
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
wait:
	for completed < n {
		select {
		case <-events:
			completed++
		case <-poll.C: // events may be dropped when the channel is full
			var left int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&left); err != nil {
				return result{}, err
			}
			if left == 0 {
				break wait
			}
		}
	}
	elapsed, cpuNote := time.Since(start), cpu()
	stopCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := client.Stop(stopCtx); err != nil {
		return result{}, err
	}
	return result{name: "river", rows: n, elapsed: elapsed,
		note: fmt.Sprintf("river %s, no-op worker, MaxWorkers %d, default fetch settings; working only (InsertManyFast of the jobs took %.2fs, %.0f jobs/s)%s", "v0.51.1", maxWorkers, insert.Seconds(), float64(n)/insert.Seconds(), cpuNote)}, nil
}

// benchUpdate is the physical limit: one statement marking every row done.
func benchUpdate(ctx context.Context, pool *pgxpool.Pool, n int64) (result, error) {
	if err := seedWork(ctx, pool, n); err != nil {
		return result{}, err
	}
	cpu := pgCPU("update", n)
	start := time.Now()
	tag, err := pool.Exec(ctx, `UPDATE work SET shardflow_status = 'done'`)
	if err != nil {
		return result{}, err
	}
	elapsed, cpuNote := time.Since(start), cpu()
	if tag.RowsAffected() != n {
		return result{}, fmt.Errorf("updated %d; want %d", tag.RowsAffected(), n)
	}
	return result{name: "update", rows: n, elapsed: elapsed, note: "one UPDATE work SET shardflow_status = 'done' over the whole table" + cpuNote}, nil
}

// countingJob counts the rows its BatchJob processed successfully and
// calls done once want are.
type countingJob struct {
	dataflow.BatchJob[postgres.Row[workRow]]
	n     *atomic.Int64
	want  int64
	first *atomic.Int64 // UnixNano of the first Fetch
	done  func()
}

func (c countingJob) Fetch(ctx context.Context, s dataflow.Shard) ([]postgres.Row[workRow], error) {
	c.first.CompareAndSwap(0, time.Now().UnixNano())
	return c.BatchJob.Fetch(ctx, s)
}

func (c countingJob) ProcessBatch(ctx context.Context, s dataflow.Shard, items []postgres.Row[workRow]) (int, error) {
	ok, err := c.BatchJob.ProcessBatch(ctx, s, items)
	if c.n.Add(int64(ok)) >= c.want {
		c.done()
	}
	return ok, err
}

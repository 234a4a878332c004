package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sinks/pgsink"
	"github.com/shardflow/shardflow/sources/postgres"
)

// errorLog is a slog.Handler sending the message and attributes of every
// ERROR record of sources/postgres to records.
type errorLog struct {
	records chan map[string]any
}

func newErrorLog() *errorLog { return &errorLog{records: make(chan map[string]any, 1000)} }

func (h *errorLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errorLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *errorLog) WithGroup(string) slog.Handler                { return h }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "sources/postgres:") {
		return nil
	}
	m := map[string]any{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	select {
	case h.records <- m:
	default: // nobody reads any more: never block the logger
	}
	return nil
}

// settle is the job of the report: each batch of orders becomes
// rows of a settlements table, written with the batch's transaction; the
// table name is the mistake.
func settle(table string) postgres.TxProcessFunc[Order] {
	return func(ctx context.Context, tx pgx.Tx, _ dataflow.Shard, orders []Order) error {
		rows := make([][]any, len(orders))
		for i, o := range orders {
			rows[i] = []any{o.ID}
		}
		_, err := pgsink.CopyAppend(ctx, tx, pgsink.Target{Table: table, Columns: []string{"order_id"}}, pgx.CopyFromRows(rows))
		return err
	}
}

// The mistyped sink of issue 10, on a Node: no row is burned, one ERROR
// line per backoff step (not per row or slice), the error in the server's
// lastError and in a metric; once the table exists every row is settled
// and lastError clears.
func TestMistypedSinkBurnsNoRow(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	const rows = 300
	newOrders(t, pool, rows)
	exec(t, pool, `CREATE TABLE settlements (order_id bigint NOT NULL)`)
	logs := newErrorLog()
	logger := slog.New(logs)
	src := newSource(t, pool, postgres.Config{MaxBackoff: time.Second, Logger: logger})

	srv := memstore.NewServer()
	st := srv.Connect()
	t.Cleanup(func() { _ = st.Close() }) // after the Node's Stop
	metrics := prometheus.NewPedanticRegistry()
	node := startNode(t, dataflow.NodeConfig{Store: st, ServerID: "w1", Logger: logger, Metrics: metrics},
		dataflow.JobConfig{JobName: "settle", ShardingTotalCount: 1, FetchDataCount: 100, ConcurrentDataProcessThreadCount: 4, StreamingProcess: true},
		src.Transactional(settle("settlementz")))
	if err := node.TriggerLocal("settle"); err != nil {
		t.Fatal(err)
	}
	// Three backoff steps: each batch of 100 rows runs as 4 slices, each
	// failing; one ERROR line per step: lines 1, 2, 3 are steps 1, 2, 3 (a
	// second line for a step would break the sequence).
	for step := 1; step <= 3; step++ {
		r := testwait.Recv(t, 30*time.Second, "the ERROR line of a backoff step", logs.records)
		if !strings.Contains(r["msg"].(string), "no row attempt counted") || r["step"] != int64(step) ||
			!strings.Contains(r["err"].(error).Error(), "settlementz") {
			t.Fatalf("ERROR line %d = %v; want backoff step %d naming settlementz", step, r, step)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status <> 'pending' OR shardflow_attempts <> 0 OR shardflow_last_error IS NOT NULL`); n != 0 {
		t.Fatalf("%d rows burned by the statement error; want 0", n)
	}
	admin := coord.NewAdmin(srv.Connect(), "shardflow")
	status, err := admin.Status(ctx, "settle")
	if err != nil {
		t.Fatal(err)
	}
	if len(status.Servers) != 1 || !strings.Contains(status.Servers[0].LastError, `relation "settlementz" does not exist`) ||
		!strings.Contains(status.Servers[0].LastError, "no row attempt counted") {
		t.Fatalf("status servers = %+v; want lastError naming settlementz", status.Servers)
	}
	if got := reported(t, metrics); got < 2 { // steps 1 and 2 are reported before step 3 is logged
		t.Fatalf("shardflow_reported_errors_total = %v; want >= 2", got)
	}

	// The operator creates the table the job meant: the run goes on.
	exec(t, pool, `CREATE TABLE settlementz (order_id bigint NOT NULL)`)
	testwait.For(t, 30*time.Second, "every order settled", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_attempts = 1`) == rows
	})
	if n := queryInt(t, pool, `SELECT count(DISTINCT order_id) FROM settlementz`); n != rows {
		t.Fatalf("settled %d distinct orders; want %d", n, rows)
	}
	testwait.ForNoError(t, 10*time.Second, "lastError cleared", func() error {
		s, err := admin.Status(ctx, "settle")
		if err == nil && s.Servers[0].LastError != "" {
			err = errors.New(s.Servers[0].LastError)
		}
		return err
	})
}

func reported(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "shardflow_reported_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// Claim mode: a statement error from the job's function releases the row
// and the rest of the batch without an attempt; a data exception is the
// row's and counts one.
func TestClaimStatementErrorReleasesTheBatchAndDataErrorsCount(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 20)
	var mu sync.Mutex
	var reports []error
	s := shard(0, 1, 20, 1).WithReporter(func(_ context.Context, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	})
	job := newSource(t, pool, postgres.Config{Logger: slog.New(newErrorLog())}).Claim(
		func(ctx context.Context, _ dataflowShard, o Order) error {
			if o.ID == 7 {
				_, err := pool.Exec(ctx, `SELECT 1 / 0`)
				return err // 22012: this row's data
			}
			_, err := pool.Exec(ctx, `INSERT INTO ledgerz VALUES ($1)`, o.ID)
			return err // 42P01 until the table exists
		})
	for round := 1; round <= 2; round++ {
		got, err := job.Fetch(ctx, s) // the second waits out the first step
		if err != nil || len(got) != 20 {
			t.Fatalf("round %d: Fetch = %d rows, %v; want 20", round, len(got), err)
		}
		if n, err := job.ProcessBatch(ctx, s, got); n != 0 || err != nil {
			t.Fatalf("round %d: ProcessBatch = %d, %v; want 0, nil", round, n, err)
		}
		if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending' AND shardflow_attempts = 0 AND shardflow_claimed_by IS NULL`); n != 20 {
			t.Fatalf("round %d: %d rows pending with no attempt; want all 20 released", round, n)
		}
	}
	mu.Lock()
	if len(reports) != 2 || !errors.Is(reports[0], postgres.ErrStatement) || !strings.Contains(reports[1].Error(), "ledgerz") {
		t.Fatalf("reports = %v; want two ErrStatement steps naming ledgerz", reports)
	}
	mu.Unlock()
	exec(t, pool, `CREATE TABLE ledgerz (id bigint)`)
	got, err := job.Fetch(ctx, s)
	if err != nil || len(got) != 20 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	if n, err := job.ProcessBatch(ctx, s, got); n != 19 || err != nil {
		t.Fatalf("ProcessBatch = %d, %v; want 19 done (row 7 failing), nil", n, err)
	}
	var attempts int
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT shardflow_attempts, shardflow_last_error FROM orders WHERE id = 7`).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "division by zero") {
		t.Fatalf("row 7: %d attempts, %q; want 1 attempt for its data exception", attempts, lastErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 3 || reports[2] != nil {
		t.Fatalf("reports = %v; want the report cleared (nil) once statements succeed", reports)
	}
}

// TestBackoffWaitEndedNamesItsCause: a Fetch whose context ends while the
// item waits out a backoff step that an earlier call opened (the item's
// previous run, which timed out) returns the statement error behind the
// step, not a bare context error, and so does one whose context ends in
// its statement: the run's error says why the item was waiting. Fails
// with the context error alone (a run that timed out so named no table in
// its history record: TestDroppedTableSeenFailingForConsecutiveRuns).
func TestBackoffWaitEndedNamesItsCause(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 10)
	job := newSource(t, pool, postgres.Config{Logger: slog.New(slog.DiscardHandler)}).Transactional(settle("settlements"))
	sh := shard(0, 1, 10, 1)
	got, err := job.Fetch(ctx, sh)
	if err != nil || len(got) != 10 {
		t.Fatalf("Fetch = %d, %v", len(got), err)
	}
	// The sink table is missing: a statement error opens a backoff step.
	if n, err := job.ProcessBatch(ctx, sh, got); n != 0 || err != nil {
		t.Fatalf("ProcessBatch = %d, %v; want 0, nil (backing off)", n, err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = job.Fetch(ended, sh)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `relation "settlements" does not exist`) {
		t.Fatalf("Fetch in an ended run = %v; want the context's end and the statement error behind the step", err)
	}
	// The run ends while the fetch's statement waits (here for a lock).
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck
	if _, err := lock.Exec(ctx, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	run, end := context.WithCancel(ctx)
	fetched := make(chan error, 1)
	go func() { _, err := job.Fetch(run, sh); fetched <- err }()
	testwait.For(t, 30*time.Second, "the fetch waiting for the table's lock", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM pg_locks WHERE relation = 'orders'::regclass AND NOT granted`) > 0
	})
	end()
	if err := <-fetched; !strings.Contains(err.Error(), `relation "settlements" does not exist`) {
		t.Fatalf("Fetch whose run ended in its statement = %v; want the statement error behind the step too", err)
	}
}

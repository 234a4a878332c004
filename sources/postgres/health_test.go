package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sources/postgres"
)

// zkSession opens a session on the package's shared ZooKeeper, closed at
// the end of the test (after the Node's Stop: register it first).
func zkSession(t *testing.T) store.Store {
	t.Helper()
	zk := integration.SharedZooKeeper(t)
	st, err := zkstore.Open(testCtx(t), zkstore.Config{Servers: zk.Servers(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// watched is a Node on real ZooKeeper with everything an operator looks
// at: status (and its health, which the console shows), history and
// metrics.
type watched struct {
	node    *dataflow.Node
	admin   *coord.Admin
	history *history.Memory
	metrics *prometheus.Registry
	ns, job string
}

func watchNode[T any](t *testing.T, ns string, jcfg dataflow.JobConfig, job dataflow.BatchJob[postgres.Row[T]], opts ...dataflow.JobOption) *watched {
	t.Helper()
	st := zkSession(t)
	w := &watched{admin: coord.NewAdmin(zkSession(t), ns), history: history.NewMemory(10000), metrics: prometheus.NewPedanticRegistry(), ns: ns, job: jcfg.JobName}
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, Namespace: ns, ServerID: "w1", History: w.history, Metrics: w.metrics,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	if err := dataflow.AddBatchJob(t.Context(), node, jcfg, job, opts...); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.node = node
	return w
}

func (w *watched) status(t *testing.T) coord.JobStatus {
	t.Helper()
	st, err := w.admin.Status(testCtx(t), w.job)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// metric returns the value of name{job, item} (item "" for none), -1
// when absent.
func (w *watched) metric(t *testing.T, name, item string) float64 {
	t.Helper()
	mfs, err := w.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" && l.GetValue() != w.job || l.GetName() == "item" && l.GetValue() != item {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// failedRecords are the history records of item with an error containing text.
func (w *watched) failedRecords(item int, text string) int {
	n := 0
	for _, r := range w.history.All() {
		if r.Item == item && r.Error != "" && strings.Contains(r.Error, text) {
			n++
		}
	}
	return n
}

// holdAfterFailure is a JobListener holding every run after one whose
// item failed in BeforeRun until release.
type holdAfterFailure struct {
	failed atomic.Bool
	seen   chan struct{}
	once   sync.Once
}

func (h *holdAfterFailure) release() { h.once.Do(func() { close(h.seen) }) }

func (h *holdAfterFailure) BeforeRun(ctx context.Context, _ dataflow.RunInfo) {
	if !h.failed.Load() {
		return
	}
	select {
	case <-h.seen:
	case <-ctx.Done():
	}
}

func (h *holdAfterFailure) AfterRun(_ context.Context, _ dataflow.RunInfo, r dataflow.RunResult) {
	for _, it := range r.Items {
		if it.Err != nil {
			h.failed.Store(true)
		}
	}
}

// A poison row whose processing panics, in claim mode on a Node: each run
// that meets it ends in the panic, and the operator sees it everywhere:
// the item failing in status with the panic as its last error, the job's
// health failing (the console's badge), a failed run in history, the run
// errors in metrics. Its claim is reclaimed after the lease, and after
// MaxAttempts the row is marked failed: the item recovers, the health is
// ok again, and every other row was processed. (A panic abandons the
// claims of its whole slice: one row per slice keeps the other rows out
// of it.)
func TestPoisonRowSeenFailingThenSetAside(t *testing.T) {
	t.Parallel() // waits for leases and cron ticks
	pool := newDB(t)
	const rows = 200
	newOrders(t, pool, rows)
	src := newSource(t, pool, postgres.Config{Lease: time.Second, MaxAttempts: 2, Logger: slog.New(slog.DiscardHandler)})
	job := src.Claim(func(_ context.Context, _ dataflowShard, o Order) error {
		if o.ID == 13 {
			panic("poison order 13")
		}
		return nil
	})
	// The item shows failing from the failed run's Complete to the next
	// clean run's, about a cron period, which a status poll on a loaded
	// machine can miss: the run after a failed one waits, its items marked
	// running (the failing state carried), until the test has seen it.
	hold := &holdAfterFailure{seen: make(chan struct{})}
	t.Cleanup(hold.release)
	w := watchNode(t, "poison-"+strings.ReplaceAll(t.Name(), "/", "-"), dataflow.JobConfig{JobName: "settle", Cron: "* * * * * ?",
		ShardingTotalCount: 2, FetchDataCount: 10, StreamingProcess: true, ConcurrentDataProcessThreadCount: 10}, job, dataflow.WithListeners(hold))

	// Order 13 is in bucket 13: item 0 of 2.
	var failing coord.JobStatus
	testwait.For(t, 60*time.Second, "item 0 shown failing with the panic", func() bool {
		failing = w.status(t)
		return failing.Items[0].ConsecutiveFailures >= 1
	})
	hold.release()
	it := failing.Items[0]
	if !strings.Contains(it.LastError, "poison order 13") || it.FailingSince == nil || it.FailingOn != "w1" {
		t.Fatalf("item 0 %+v; want failing on w1 since a time with the panic as its error", it)
	}
	if failing.Health != coord.HealthFailing || !strings.Contains(strings.Join(failing.HealthReasons, "\n"), "item 0 failing") {
		t.Fatalf("health %q %v; want failing naming item 0", failing.Health, failing.HealthReasons)
	}
	if n := w.failedRecords(0, "poison order 13"); n < 1 {
		t.Fatalf("history has %d failed runs of item 0 with the panic; want at least 1 (records %+v)", n, w.history.All())
	}
	testwait.For(t, 30*time.Second, "the run errors of item 0 in the metrics", func() bool {
		return w.metric(t, "shardflow_item_run_errors_total", "0") >= 1
	})

	// The row's claim is reclaimed after the lease and it fails again
	// until MaxAttempts: then it is marked failed and the item recovers.
	testwait.For(t, 60*time.Second, "order 13 marked failed, every other order done", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`) == rows-1 &&
			queryInt(t, pool, `SELECT count(*) FROM orders WHERE id = 13 AND shardflow_status = 'failed'`) == 1
	})
	testwait.For(t, 30*time.Second, "item 0 recovered, health ok", func() bool {
		st := w.status(t)
		return st.Items[0].ConsecutiveFailures == 0 && st.Health == coord.HealthOK
	})
	if v := w.metric(t, "shardflow_item_consecutive_failed_runs", "0"); v != 0 {
		t.Fatalf("shardflow_item_consecutive_failed_runs{item=0} = %v after a run without error; want 0", v)
	}
	if st := w.status(t); st.Items[1].ConsecutiveFailures != 0 || st.Items[1].LastError != "" {
		t.Fatalf("item 1 %+v; it never met the poison row, want never failing", st.Items[1])
	}
}

// A table dropped mid-run, in transactional mode on a Node with an item
// timeout: each run's fetch backs off the undefined table until the
// timeout ends it, so the items are shown failing for more and more runs
// with the cause in their last error, the server's lastError names the
// table, health is failing, history records the failed runs and the
// metrics count them. Once the table is back the items recover.
func TestDroppedTableSeenFailingForConsecutiveRuns(t *testing.T) {
	t.Parallel() // waits for item timeouts and cron ticks
	pool := newDB(t)
	newOrders(t, pool, 400)
	exec(t, pool, `CREATE TABLE effects (order_id bigint NOT NULL)`)
	dropped := make(chan struct{})
	var batches atomic.Int64
	src := newSource(t, pool, postgres.Config{MaxBackoff: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	job := src.Transactional(func(ctx context.Context, tx pgx.Tx, s dataflowShard, orders []Order) error {
		if batches.Add(1) == 3 {
			// Mid-run: drop the table from another connection once
			// this transaction has ended (it holds row locks).
			go dropOrders(t, pool, dropped)
		}
		return writeEffects(ctx, tx, s, orders)
	})
	w := watchNode(t, "dropped-"+strings.ReplaceAll(t.Name(), "/", "-"), dataflow.JobConfig{JobName: "settle", Cron: "* * * * * ?",
		ShardingTotalCount: 2, FetchDataCount: 20, StreamingProcess: true, ItemTimeout: 2 * time.Second}, job)
	testwait.Recv(t, 60*time.Second, "the orders table dropped mid-run", dropped)

	var st coord.JobStatus
	testwait.For(t, 60*time.Second, "both items failing for 2 runs or more", func() bool {
		st = w.status(t)
		return st.Items[0].ConsecutiveFailures >= 2 && st.Items[1].ConsecutiveFailures >= 2
	})
	for _, it := range st.Items {
		if !strings.Contains(it.LastError, "timed out after 2s") || !strings.Contains(it.LastError, `relation "orders" does not exist`) {
			t.Fatalf("item %d's last error %q; want the timeout and its cause, the dropped table", it.Item, it.LastError)
		}
		if it.FailingSince == nil || it.FailingSince.After(time.Now()) {
			t.Fatalf("item %d failing since %v; want a time in the past", it.Item, it.FailingSince)
		}
	}
	if st.Health != coord.HealthFailing {
		t.Fatalf("health %q %v; want failing", st.Health, st.HealthReasons)
	}
	for item := range 2 {
		if n := w.failedRecords(item, `relation "orders" does not exist`); n < 2 {
			t.Fatalf("history has %d failed runs of item %d naming the table; want at least 2", n, item)
		}
		if v := w.metric(t, "shardflow_item_consecutive_failed_runs", fmt.Sprint(item)); v < 2 {
			t.Fatalf("shardflow_item_consecutive_failed_runs{item=%d} = %v; want at least 2", item, v)
		}
	}

	// The operator restores the table: the items recover.
	newOrders(t, pool, 10)
	testwait.For(t, 60*time.Second, "items recovered, health ok", func() bool {
		st = w.status(t)
		return st.Items[0].ConsecutiveFailures == 0 && st.Items[1].ConsecutiveFailures == 0 && st.Health == coord.HealthOK
	})
	testwait.For(t, 30*time.Second, "the restored orders done", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`) == 10
	})
}

// dropOrders drops the orders table and closes done.
func dropOrders(t *testing.T, pool *pgxpool.Pool, done chan<- struct{}) {
	defer close(done)
	if _, err := pool.Exec(context.Background(), `DROP TABLE orders`); err != nil {
		t.Errorf("DROP TABLE orders: %v", err)
	}
}

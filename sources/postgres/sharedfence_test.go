package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sources/postgres"
)

// protocol stands in for coord's ownership check on a pgstore tree: like
// Run.CheckOwnership it reads the server's sharding node and the item's
// node through the store (with the caller's ctx, so a store.ReadLog sees
// the reads) and passes while the sharding node's mzxid is the epoch and
// the session is the one the run began on.
type protocol struct {
	st       *pgstore.Store
	sharding string
	item     string
	epoch    int64
	session  int64
	checks   atomic.Int32
}

func (p *protocol) check(ctx context.Context) error {
	p.checks.Add(1)
	_, st, err := p.st.Get(ctx, p.sharding)
	if err != nil {
		return err
	}
	if _, _, err := p.st.Exists(ctx, p.item); err != nil {
		return err
	}
	if sess, _ := p.st.Session(); sess.ID != p.session {
		return errors.New("session changed")
	}
	if st.Mzxid != p.epoch {
		return fmt.Errorf("not the owner: epoch %d, now %d", p.epoch, st.Mzxid)
	}
	return nil
}

// statements counts the round trips a pool makes: every query on its own
// is one, and so are a COPY and a batch (pgx's Batch: a batch's queries
// are sent together and, once prepared on the connection, answered
// together).
// guarded counts the fences checked in the batch's transaction (the
// statement locking the coordination rows), separate the fence rows
// written or locked after a check of their own (alone, or with the
// commit).
type statements struct{ n, guarded, separate atomic.Int64 }

func (c *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.classify(d.SQL)
	return ctx
}
func (c *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.classify(d.SQL)
}
func (c *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *statements) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statements) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (c *statements) classify(sql string) {
	switch {
	case strings.Contains(sql, "FOR KEY SHARE") && strings.Contains(sql, "shardflow_fence"):
		c.guarded.Add(1)
	case strings.Contains(sql, "INSERT INTO shardflow_fence"), strings.Contains(sql, "FROM shardflow_fence WHERE"):
		c.separate.Add(1)
	}
}

// sharedDB is a test schema holding a work table "orders" of n rows, a
// table "effects" for the job's writes, and a pgstore tree: coordination
// and data in one database. It returns the source's pool (counting its
// statements), the store, and a protocol on the tree for item 0 of 1.
func sharedDB(t *testing.T, n int) (*pgxpool.Pool, *statements, *protocol) {
	t.Helper()
	dsn := integration.SharedPostgres(t).NewSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The tree in a schema of its own, short: pgstore's NOTIFY channel
	// adds its name to a prefix, within Postgres's 63 bytes.
	schema := fmt.Sprintf("fence_%d", time.Now().UnixNano()%1_000_000_000)
	_ = u
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	count := &statements{}
	cfg.ConnConfig.Tracer = count
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	newOrders(t, pool, max(n, -n))
	exec(t, pool, `CREATE TABLE effects (id bigint PRIMARY KEY)`)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	})

	st, err := pgstore.Open(testCtx(t), pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if n < 0 { // a tree for a Node: no nodes of the stand-in protocol
		return pool, count, &protocol{st: st}
	}
	ctx := testCtx(t)
	for _, p := range []string{"/job", "/job/sharding", "/job/items", "/job/items/0"} {
		if _, err := st.Create(ctx, p, []byte("0"), store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	_, ss, err := st.Get(ctx, "/job/sharding")
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := st.Session()
	return pool, count, &protocol{st: st, sharding: "/job/sharding", item: "/job/items/0", epoch: ss.Mzxid, session: sess.ID}
}

// effectsJob writes every row's key into effects in the batch's
// transaction, then runs during (if set).
func effectsJob(src *postgres.Source[Order], during func()) *postgres.TxJob[Order] {
	return src.Transactional(func(ctx context.Context, tx pgx.Tx, _ dataflow.Shard, items []Order) error {
		for _, o := range items {
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, o.ID); err != nil {
				return err
			}
		}
		if during != nil {
			during()
		}
		return nil
	})
}

// TestSharedDatabaseFencesInTheBatchTransaction: with pgstore in the
// source's database, the protocol is asked once per item run; every later
// batch checks its ownership in the statement that writes its fence row
// (3 round trips per batch: begin with the lock, the mark and the next
// fetch; fence; commit; besides the job's own, and no coordination round
// trip); and a batch whose epoch
// moved while it ran commits nothing, neither its rows' done marks nor
// its effects. Fails without the in-transaction check: the protocol is
// then asked at every batch (3 checks for 3 batches, not 1).
func TestSharedDatabaseFencesInTheBatchTransaction(t *testing.T) {
	pool, count, p := sharedDB(t, 40)
	src := newSource(t, pool, postgres.Config{})
	moveEpoch := false
	job := effectsJob(src, func() {
		if moveEpoch { // a reshard rewrites the server's sharding node
			if _, err := p.st.Set(testCtx(t), p.sharding, []byte("1"), -1); err != nil {
				t.Error(err)
			}
		}
	})
	sh := shard(0, 1, 10, p.epoch).WithFence(p.check)
	ctx := testCtx(t)
	batch := func() (int, error) {
		t.Helper()
		rows, err := job.Fetch(ctx, sh)
		if err != nil || len(rows) != 10 {
			t.Fatalf("Fetch: %d rows, %v", len(rows), err)
		}
		return job.ProcessBatch(ctx, sh, rows)
	}
	if n, err := batch(); n != 10 || err != nil {
		t.Fatalf("first batch: %d, %v", n, err)
	}
	for i := range 2 {
		before := count.n.Load()
		if n, err := batch(); n != 10 || err != nil {
			t.Fatalf("batch %d: %d, %v", i+2, n, err)
		}
		// Fetch makes none (the batch before read its rows), the 10
		// effects 10, the batch its own 3.
		if got := count.n.Load() - before - 10; got != 3 {
			t.Errorf("batch %d made %d round trips of its own, want 3 (begin with the lock, the mark and the next fetch; fence; commit)", i+2, got)
		}
	}
	if got := p.checks.Load(); got != 1 {
		t.Errorf("the protocol was asked %d times for 3 batches, want once (then in each batch's transaction)", got)
	}

	moveEpoch = true
	n, err := batch()
	if !errors.Is(err, postgres.ErrFenced) || n != 0 {
		t.Fatalf("batch after the epoch moved: %d, %v; want 0 and ErrFenced", n, err)
	}
	if done := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`); done != 30 {
		t.Errorf("%d rows done, want 30 (the fenced batch's 10 stay pending)", done)
	}
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != 30 {
		t.Errorf("%d effects, want 30 (the fenced batch's rolled back)", e)
	}
	if got := p.checks.Load(); got != 2 {
		t.Errorf("protocol asked %d times, want 2: once more when the guard failed in the transaction", got)
	}
}

// TestSharedDatabaseFenceHoldsUntilCommit: the ownership checked in the
// batch's transaction cannot move before that transaction commits: a
// coordination write rewriting the item's sharding node, issued between
// the batch's fence and its commit, waits for the commit. Fails with a
// check outside the transaction (the write then goes through, and the
// batch commits after its ownership moved).
func TestSharedDatabaseFenceHoldsUntilCommit(t *testing.T) {
	pool, _, p := sharedDB(t, 10)
	src := newSource(t, pool, postgres.Config{})
	job := effectsJob(src, nil)
	ctx := testCtx(t)
	moved := make(chan error, 1)
	var waited bool
	// The hook below sits idle in the batch's transaction for as long as
	// the machine takes to start the write: more than the 5 s a stopped
	// worker is given.
	defer postgres.SetFenceIdleTimeout(time.Minute)()
	restore := postgres.SetAfterFence(func() {
		go func() {
			_, err := p.st.Set(ctx, p.sharding, []byte("1"), -1)
			moved <- err
		}()
		// Either the write waits for a lock (this batch's) or it is done.
		for {
			select {
			case err := <-moved:
				t.Errorf("the sharding node was rewritten (%v) between the batch's fence and its commit", err)
				moved <- err
				return
			default:
			}
			if queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name LIKE 'shardflow-pgstore%'`) > 0 {
				waited = true
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	defer restore()
	sh := shard(0, 1, 10, p.epoch).WithFence(p.check)
	rows, err := job.Fetch(ctx, sh)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := job.ProcessBatch(ctx, sh, rows); n != 10 || err != nil {
		t.Fatalf("ProcessBatch: %d, %v", n, err)
	}
	if err := <-moved; err != nil {
		t.Fatalf("the coordination write after the commit: %v", err)
	}
	if !waited {
		t.Fatal("the coordination write did not wait for the batch's commit")
	}
}

// TestSharedDatabaseWithTheCoordProtocol: a Node coordinating through
// pgstore in the source's database: coord's own ownership check is recorded
// (store.ReadLog) and every batch of the run is fenced in its transaction,
// none with a separate check.
func TestSharedDatabaseWithTheCoordProtocol(t *testing.T) {
	const rows, batch = 200, 20
	pool, count, p := sharedDB(t, -rows)
	src := newSource(t, pool, postgres.Config{})
	startNode(t, dataflow.NodeConfig{Store: p.st, ServerID: "w1"}, dataflow.JobConfig{JobName: "job", Cron: "* * * * * ?",
		ShardingTotalCount: 1, FetchDataCount: batch, ConcurrentDataProcessThreadCount: 1, StreamingProcess: true}, effectsJob(src, nil))
	testwait.For(t, 60*time.Second, "every row done", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`) == rows
	})
	if e := queryInt(t, pool, `SELECT count(*) FROM effects`); e != rows {
		t.Errorf("%d effects, want %d", e, rows)
	}
	if g, s := count.guarded.Load(), count.separate.Load(); g != rows/batch || s != 0 {
		t.Errorf("%d batches fenced in their transaction and %d after a separate check; want %d and 0", g, s, rows/batch)
	}
}

// TestSharedDatabaseWithoutGrantsAsksTheStore: a source whose role may not
// read and lock the coordination schema's tables, in the store's database,
// asks the store at every batch (FenceTx's check) instead of failing its
// batches on the missing privilege.
func TestSharedDatabaseWithoutGrantsAsksTheStore(t *testing.T) {
	admin, _, p := sharedDB(t, 30)
	ctx := testCtx(t)
	role := fmt.Sprintf("fence_role_%d", time.Now().UnixNano()%1_000_000_000)
	exec(t, admin, `CREATE ROLE `+role+` LOGIN PASSWORD 'pw'`)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = admin.Exec(context.Background(), `DROP ROLE `+role)
	})
	var schema string
	if err := admin.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	exec(t, admin, `GRANT USAGE ON SCHEMA `+schema+` TO `+role)
	exec(t, admin, `GRANT SELECT, INSERT, UPDATE ON orders, effects, shardflow_fence TO `+role)
	cfg := admin.Config().Copy()
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "pw"
	count := &statements{}
	cfg.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	job := effectsJob(newSource(t, pool, postgres.Config{}), nil)
	sh := shard(0, 1, 10, p.epoch).WithFence(p.check)
	for i := range 3 {
		rows, err := job.Fetch(ctx, sh)
		if err != nil || len(rows) != 10 {
			t.Fatalf("Fetch %d: %d rows, %v", i, len(rows), err)
		}
		if n, err := job.ProcessBatch(ctx, sh, rows); n != 10 || err != nil {
			t.Fatalf("batch %d: %d, %v", i, n, err)
		}
	}
	if got := p.checks.Load(); got != 3 {
		t.Errorf("the store was asked %d times for 3 batches, want 3", got)
	}
	if g, s := count.guarded.Load(), count.separate.Load(); g != 0 || s != 3 {
		t.Errorf("%d batches fenced in their transaction and %d after a check of their own; want 0 and 3", g, s)
	}
}

package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/sources/postgres"
)

func TestMain(m *testing.M) { integration.Main(m) }

// newDB returns a pool whose search_path is a fresh schema, dropped at the
// end of the test, on the package's shared Postgres (SHARDFLOW_PG, or a
// container started by the integration harness).
func newDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(integration.SharedPostgres(t).NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
	return n
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// Order is the item type of the tests.
type Order struct {
	ID      int64
	Payload string
}

// newOrders creates a work table "orders" with n rows (ids 1..n), migrated.
func newOrders(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, payload text NOT NULL)`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'p' || g FROM generate_series(1, $1::int) g`, n)
	if err := postgres.Migrate(context.Background(), pool, postgres.TableSpec{Table: "orders"}); err != nil {
		t.Fatal(err)
	}
}

func newSource(t testing.TB, pool *pgxpool.Pool, cfg postgres.Config) *postgres.Source[Order] {
	t.Helper()
	cfg.Pool = pool
	if cfg.Table.Table == "" {
		cfg.Table.Table = "orders"
	}
	src, err := postgres.NewSource[Order](context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// startNode starts a Node of cfg running job as jcfg and stops it (30 s
// at most) at the end of the test. A store in cfg must be closed by a
// cleanup registered before this call (t.Cleanup runs last first).
func startNode(t *testing.T, cfg dataflow.NodeConfig, jcfg dataflow.JobConfig, job dataflow.BatchJob[postgres.Row[Order]]) *dataflow.Node {
	t.Helper()
	node, err := dataflow.NewNode(cfg)
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
	if err := dataflow.AddBatchJob(t.Context(), node, jcfg, job); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return node
}

type dataflowShard = dataflow.Shard

func shard(item, total, fetch int, epoch int64) dataflow.Shard {
	return dataflow.Shard{JobName: "job", ServerID: "s", Item: item, Total: total, FetchCount: fetch, Epoch: epoch}
}

// on returns s as run on server id.
func on(id string, s dataflow.Shard) dataflow.Shard {
	s.ServerID = id
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

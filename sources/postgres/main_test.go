package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/sources/postgres"
)

func TestMain(m *testing.M) { integration.Main(m) }

var schemaSeq atomic.Int64

// newDB returns a pool whose search_path is a fresh schema, dropped at the
// end of the test, on the package's shared Postgres (SHARDFLOW_PG, or a
// container started by the integration harness).
func newDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := integration.SharedPostgres(t).DSN()
	ctx := context.Background()
	admin, err := postgres.Connect(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("sft_%d_%d", os.Getpid(), schemaSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		admin.Close()
	})
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

type dataflowShard = dataflow.Shard

func shard(item, total, fetch int, epoch int64) dataflow.Shard {
	return dataflow.Shard{JobName: "job", Item: item, Total: total, FetchCount: fetch, Epoch: epoch}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

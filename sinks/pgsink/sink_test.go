package pgsink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/sinks/pgsink"
)

func TestMain(m *testing.M) { integration.Main(m) }

// newDB returns a pool on a fresh schema of the package's shared Postgres
// (SHARDFLOW_PG, or a container started by the integration harness),
// dropped at cleanup.
func newDB(t *testing.T) (*pgxpool.Pool, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, integration.SharedPostgres(t).NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE totals (id bigint PRIMARY KEY, amount bigint NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	return pool, ctx
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var totals = pgsink.Target{Table: "totals", Columns: []string{"id", "amount"}, ConflictColumns: []string{"id"}}

func rows(from, to, amount int64) pgx.CopyFromSource {
	var r [][]any
	for i := from; i <= to; i++ {
		r = append(r, []any{i, amount})
	}
	return pgx.CopyFromRows(r)
}

func TestCopyAppendCommitsWithTheCallersTransaction(t *testing.T) {
	pool, ctx := newDB(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := pgsink.CopyAppend(ctx, tx, totals, rows(1, 500, 1)); err != nil || n != 500 {
		t.Fatalf("CopyAppend = %d, %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM totals`); n != 0 {
		t.Fatalf("rows after rollback = %d; want 0", n)
	}
	if n, err := pgsink.CopyAppend(ctx, pool, totals, rows(1, 500, 1)); err != nil || n != 500 {
		t.Fatalf("CopyAppend on the pool = %d, %v", n, err)
	}
	_, err = pgsink.CopyAppend(ctx, pool, totals, rows(500, 500, 1))
	if err == nil || !strings.Contains(err.Error(), "totals") {
		t.Fatalf("duplicate key err = %v; want an error naming totals", err)
	}
}

func TestCopyUpsertIsIdempotent(t *testing.T) {
	pool, ctx := newDB(t)
	if n, err := pgsink.CopyUpsert(ctx, pool, totals, rows(1, 100, 1)); err != nil || n != 100 {
		t.Fatalf("first CopyUpsert = %d, %v", n, err)
	}
	// DO NOTHING: the overlap is skipped.
	if n, err := pgsink.CopyUpsert(ctx, pool, totals, rows(51, 150, 2)); err != nil || n != 50 {
		t.Fatalf("CopyUpsert DO NOTHING = %d, %v; want 50 new rows", n, err)
	}
	if n := count(t, pool, `SELECT sum(amount) FROM totals`); n != 100+2*50 {
		t.Fatalf("sum = %d; want 200", n)
	}
	// DO UPDATE: the overlap takes the new amount.
	up := totals
	up.UpdateColumns = []string{"amount"}
	if n, err := pgsink.CopyUpsert(ctx, pool, up, rows(1, 150, 3)); err != nil || n != 150 {
		t.Fatalf("CopyUpsert DO UPDATE = %d, %v", n, err)
	}
	if n := count(t, pool, `SELECT sum(amount) FROM totals`); n != 450 {
		t.Fatalf("sum = %d; want 450", n)
	}
}

func TestCopyUpsertInsideATransactionTwice(t *testing.T) {
	pool, ctx := newDB(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for i := range 2 {
		if _, err := pgsink.CopyUpsert(ctx, tx, totals, rows(int64(i*10+1), int64(i*10+10), 1)); err != nil {
			t.Fatalf("CopyUpsert %d in one transaction: %v", i, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM totals`); n != 0 {
		t.Fatalf("rows visible before commit = %d; want 0", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM totals`); n != 20 {
		t.Fatalf("rows after commit = %d; want 20", n)
	}
}

func TestTargetValidation(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		target pgsink.Target
		upsert bool
		field  string
	}{
		{pgsink.Target{Columns: []string{"a"}}, false, "Target.Table"},
		{pgsink.Target{Table: "x"}, false, "Target.Columns"},
		{pgsink.Target{Table: "x", Columns: []string{"a"}}, true, "Target.ConflictColumns"},
	} {
		var err error
		if tc.upsert {
			_, err = pgsink.CopyUpsert(ctx, nil, tc.target, nil)
		} else {
			_, err = pgsink.CopyAppend(ctx, nil, tc.target, nil)
		}
		if !errors.Is(err, pgsink.ErrTarget) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err = %v; want ErrTarget naming %s", tc.target, err, tc.field)
		}
	}
}

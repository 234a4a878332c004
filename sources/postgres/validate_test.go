package postgres_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/sources/postgres"
)

func TestNewSourceNamesWhatIsMissing(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	exec(t, pool, `CREATE TABLE raw (id bigint PRIMARY KEY, payload text)`)
	exec(t, pool, `CREATE TABLE half (id bigint PRIMARY KEY, payload text)`)
	if err := postgres.Migrate(ctx, pool, postgres.TableSpec{Table: "half", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	newOrders(t, pool, 0)

	tests := []struct {
		name     string
		spec     postgres.TableSpec
		sentinel error
		mention  []string
	}{
		{"missing table", postgres.TableSpec{Table: "nope"}, postgres.ErrMissingTable, []string{"nope"}},
		{"missing schema-qualified table", postgres.TableSpec{Table: "other.orders"}, postgres.ErrMissingTable, []string{"other.orders"}},
		{"missing key", postgres.TableSpec{Table: "orders", Key: "order_id"}, postgres.ErrMissingColumn, []string{`"order_id"`, "orders", "TableSpec.Key"}},
		{"unmigrated table", postgres.TableSpec{Table: "raw"}, postgres.ErrMissingColumn, []string{`"shardflow_bucket"`, "raw", "postgres.Migrate"}},
		{"half-migrated table", postgres.TableSpec{Table: "half"}, postgres.ErrMissingColumn, []string{`"shardflow_status"`, "half"}},
		{"missing user column", postgres.TableSpec{Table: "orders", Columns: []string{"id", "amount"}}, postgres.ErrMissingColumn, []string{`"amount"`, "orders"}},
		{"non-integer key", postgres.TableSpec{Table: "orders", Key: "payload"}, postgres.ErrConfig, []string{"payload", "text"}},
		{"empty table name", postgres.TableSpec{}, postgres.ErrConfig, []string{"TableSpec.Table"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: tc.spec})
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("err = %v; want %v", err, tc.sentinel)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestNewSourceNeedsTheFenceTable(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 0)
	exec(t, pool, `DROP TABLE shardflow_fence`)
	_, err := postgres.NewSource[Order](testCtx(t), postgres.Config{Pool: pool, Table: postgres.TableSpec{Table: "orders"}})
	if !errors.Is(err, postgres.ErrMissingTable) || !strings.Contains(err.Error(), "shardflow_fence") {
		t.Fatalf("err = %v; want ErrMissingTable naming shardflow_fence", err)
	}
}

// A work table prepared before the pending index existed (or one whose
// index was dropped) is refused with the index's name and both fixes, and
// running Migrate again creates it.
func TestNewSourceNeedsThePendingIndex(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 0)
	exec(t, pool, `DROP INDEX orders_shardflow_pending`)
	spec := postgres.TableSpec{Table: "orders"}
	_, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec})
	if !errors.Is(err, postgres.ErrMissingIndex) {
		t.Fatalf("err = %v; want ErrMissingIndex", err)
	}
	for _, m := range []string{"orders_shardflow_pending", "postgres.Migrate",
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS "orders_shardflow_pending" ON "orders" ("id", "shardflow_bucket") WHERE "shardflow_status" = 'pending'`} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec}); err != nil {
		t.Fatalf("after Migrate: %v", err)
	}
}

func TestNewSourceNamesTheMismatchedField(t *testing.T) {
	pool := newDB(t)
	newOrders(t, pool, 0)
	type extraField struct {
		ID      int64
		Payload string
		Amount  int64
	}
	_, err := postgres.NewSource[extraField](testCtx(t), postgres.Config{Pool: pool, Table: postgres.TableSpec{Table: "orders"}})
	if !errors.Is(err, postgres.ErrRowMismatch) || !strings.Contains(err.Error(), "Amount") {
		t.Fatalf("err = %v; want ErrRowMismatch naming field Amount", err)
	}
	type missingField struct{ ID int64 }
	_, err = postgres.NewSource[missingField](testCtx(t), postgres.Config{Pool: pool, Table: postgres.TableSpec{Table: "orders"}})
	if !errors.Is(err, postgres.ErrRowMismatch) || !strings.Contains(err.Error(), "payload") {
		t.Fatalf("err = %v; want ErrRowMismatch naming column payload", err)
	}
	// Listing the columns fixes it.
	if _, err := postgres.NewSource[missingField](testCtx(t), postgres.Config{Pool: pool,
		Table: postgres.TableSpec{Table: "orders", Columns: []string{"id"}}}); err != nil {
		t.Fatalf("with Columns [id]: %v", err)
	}
}

func TestMigrateIsIdempotentAndComputesBuckets(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, payload text NOT NULL)`)
	exec(t, pool, `INSERT INTO orders VALUES (-1, 'a'), (0, 'b'), (1023, 'c'), (1024, 'd'), (-1025, 'e')`)
	for range 2 {
		if err := postgres.Migrate(ctx, pool, postgres.TableSpec{Table: "orders"}); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[int64]int64{-1: 1023, 0: 0, 1023: 1023, 1024: 0, -1025: 1023} {
		if got := queryInt(t, pool, `SELECT shardflow_bucket FROM orders WHERE id = $1`, id); got != want {
			t.Errorf("bucket of id %d = %d; want %d", id, got, want)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'pending' AND shardflow_attempts = 0`); n != 5 {
		t.Errorf("pending rows after Migrate = %d; want 5", n)
	}
}

// Migrate on a migrated table takes no lock that waits for the table's
// writers: every worker runs it at start, and a CREATE INDEX IF NOT
// EXISTS of an index that exists still took its SHARE lock first, so a
// worker restarted beside an open write transaction (a stopped worker's)
// waited for it and queued every other writer behind it (pgbatch's fault
// tests stalled so). The write transaction stays open for the whole call;
// lock_timeout turns the wait, which must not happen at all, into an error.
func TestMigrateAgainDoesNotWaitForOpenWrites(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, payload text NOT NULL)`)
	exec(t, pool, `INSERT INTO orders VALUES (1, 'a')`)
	spec := postgres.TableSpec{Table: "orders"}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `UPDATE orders SET payload = 'b' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET lock_timeout = '1s'`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), `RESET lock_timeout`) }()
	if err := postgres.Migrate(ctx, conn, spec); err != nil {
		t.Fatalf("Migrate again beside an open write transaction: %v; want no wait for its lock", err)
	}
}

func TestConnectNamesTheEndpointWithinTheBound(t *testing.T) {
	ctx := testCtx(t)
	// A closed port: refused at once.
	start := time.Now()
	_, err := postgres.Connect(ctx, "postgres://nobody@127.0.0.1:1/db", 0)
	if !errors.Is(err, postgres.ErrUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v; want ErrUnreachable naming 127.0.0.1:1", err)
	}
	// A server that accepts and never answers: bounded by connect_timeout.
	hole := blackHole(t)
	start = time.Now()
	_, err = postgres.Connect(ctx, "postgres://nobody@"+hole+"/db?connect_timeout=1", 0)
	if !errors.Is(err, postgres.ErrUnreachable) || !strings.Contains(err.Error(), hole) {
		t.Fatalf("err = %v; want ErrUnreachable naming %s", err, hole)
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("Connect took %s; want about the 1s connect_timeout", d)
	}
	// A DSN that does not parse.
	_, err = postgres.Connect(ctx, "postgres://u:secret@host:notaport/db", 0)
	if !errors.Is(err, postgres.ErrConfig) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err = %v; want ErrConfig without the password", err)
	}
}

func TestConnectDefaultTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the 10s default connect timeout")
	}
	hole := blackHole(t)
	start := time.Now()
	_, err := postgres.Connect(context.Background(), "postgres://nobody@"+hole+"/db", 0)
	d := time.Since(start)
	if !errors.Is(err, postgres.ErrUnreachable) || !strings.Contains(err.Error(), hole) {
		t.Fatalf("err = %v; want ErrUnreachable naming %s", err, hole)
	}
	if d < 9*time.Second || d > 13*time.Second {
		t.Errorf("Connect took %s; want about DefaultConnectTimeout (%s)", d, postgres.DefaultConnectTimeout)
	}
}

// blackHole listens on a local port, accepts connections and never
// answers; it returns host:port. Stopped and waited for at cleanup.
func blackHole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

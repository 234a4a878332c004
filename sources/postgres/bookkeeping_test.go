package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

// Invoice has the business columns a real table has, named like the first
// release's bookkeeping columns.
type Invoice struct {
	ID        int64
	Amount    int64
	Status    string
	Attempts  int32
	LastError *string
	Bucket    string
	ClaimedAt time.Time
}

const invoicesDDL = `CREATE TABLE invoices (
  id         bigint PRIMARY KEY,
  amount     bigint NOT NULL,
  status     text NOT NULL DEFAULT 'open',
  attempts   int NOT NULL DEFAULT 7,
  last_error text DEFAULT 'business error text',
  bucket     text NOT NULL DEFAULT 'north',
  claimed_at timestamptz NOT NULL DEFAULT '2020-01-02 03:04:05+00')`

// businessDigest is a digest of every business column of invoices.
const businessDigest = `SELECT md5(string_agg(concat_ws('|', id, amount, status, attempts, last_error, bucket, claimed_at), ',' ORDER BY id)) FROM invoices`

func queryText(t testing.TB, pool *pgxpool.Pool, sql string) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
	return s
}

// drainInvoices runs fetch and process until a fetch comes back empty.
func drainInvoices(t *testing.T, fetch func() ([]postgres.Row[Invoice], error), process func([]postgres.Row[Invoice]) (int, error)) int {
	t.Helper()
	n := 0
	for range 1000 {
		got, err := fetch()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return n
		}
		for _, r := range got {
			if r.Value.Status != "open" || r.Value.Bucket != "north" {
				t.Fatalf("row %d scanned as %+v; want its business status and bucket", r.Key, r.Value)
			}
		}
		done, err := process(got)
		if err != nil {
			t.Fatal(err)
		}
		n += done
	}
	t.Fatal("still rows after 1000 fetches")
	return n
}

func TestBusinessColumnsNamedLikeBookkeepingAreNeverWritten(t *testing.T) {
	for _, mode := range []string{"claim", "transactional"} {
		t.Run(mode, func(t *testing.T) {
			pool := newDB(t)
			ctx := testCtx(t)
			exec(t, pool, invoicesDDL)
			exec(t, pool, `INSERT INTO invoices (id, amount) SELECT g, g * 10 FROM generate_series(1, 200) g`)
			spec := postgres.TableSpec{Table: "invoices"}
			if err := postgres.Migrate(ctx, pool, spec); err != nil {
				t.Fatal(err)
			}
			// Rows the application inserts later, naming no bookkeeping column.
			exec(t, pool, `INSERT INTO invoices (id, amount) SELECT g, g * 10 FROM generate_series(201, 300) g`)
			exec(t, pool, `INSERT INTO invoices (id, amount, status) VALUES (-5, 1, 'open')`)
			before := queryText(t, pool, businessDigest)
			src, err := postgres.NewSource[Invoice](ctx, postgres.Config{Pool: pool, Table: spec})
			if err != nil {
				t.Fatal(err)
			}
			s := shard(0, 1, 64, 1)
			var n int
			if mode == "claim" {
				job := src.Claim(func(context.Context, dataflowShard, Invoice) error { return nil })
				n = drainInvoices(t, func() ([]postgres.Row[Invoice], error) { return job.Fetch(ctx, s) },
					func(rs []postgres.Row[Invoice]) (int, error) { return job.ProcessBatch(ctx, s, rs) })
			} else {
				job := src.Transactional(func(context.Context, pgx.Tx, dataflowShard, []Invoice) error { return nil })
				n = drainInvoices(t, func() ([]postgres.Row[Invoice], error) { return job.Fetch(ctx, s) },
					func(rs []postgres.Row[Invoice]) (int, error) { return job.ProcessBatch(ctx, s, rs) })
			}
			if n != 301 {
				t.Fatalf("processed %d rows; want 301 (200 before Migrate, 101 inserted after)", n)
			}
			if d := queryInt(t, pool, `SELECT count(*) FROM invoices WHERE shardflow_status = 'done'`); d != 301 {
				t.Fatalf("done = %d; want 301", d)
			}
			if after := queryText(t, pool, businessDigest); after != before {
				t.Fatal("the business columns status, attempts, last_error, bucket, claimed_at changed")
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM invoices WHERE status <> 'open' OR attempts <> 7 OR bucket <> 'north'`); n != 0 {
				t.Fatalf("%d rows with a business column changed", n)
			}
		})
	}
}

func TestMigrateRefusesAColumnItDidNotCreate(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	exec(t, pool, `CREATE TABLE jobs (id bigint PRIMARY KEY, shardflow_status text DEFAULT 'mine')`)
	exec(t, pool, `INSERT INTO jobs (id) VALUES (1), (2)`)
	spec := postgres.TableSpec{Table: "jobs"}
	for name, err := range map[string]error{
		"Migrate": postgres.Migrate(ctx, pool, spec),
		"NewSource": func() error {
			_, err := postgres.NewSource[struct{ ID int64 }](ctx, postgres.Config{Pool: pool, Table: spec})
			return err
		}(),
	} {
		if !errors.Is(err, postgres.ErrColumnTaken) {
			t.Fatalf("%s: err = %v; want ErrColumnTaken", name, err)
		}
		t.Logf("%s: %v", name, err)
		for _, m := range []string{`"shardflow_status"`, "jobs", "TableSpec.Bookkeeping.Status", "COMMENT ON COLUMN"} {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not mention %s", name, err, m)
			}
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'jobs'`); n != 2 {
		t.Fatalf("jobs has %d columns after the refused Migrate; want 2 (nothing added)", n)
	}
	// The fix the error names: another name for the bookkeeping column.
	spec.Bookkeeping.Status = "sf_state"
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		t.Fatal(err)
	}
	type job struct {
		ID              int64
		ShardflowStatus string
	}
	src, err := postgres.NewSource[job](ctx, postgres.Config{Pool: pool, Table: spec})
	if err != nil {
		t.Fatal(err)
	}
	if cols := src.Columns(); strings.Join(cols, ",") != "id,shardflow_status" {
		t.Fatalf("columns of T = %v; want the user's id and shardflow_status", cols)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM jobs WHERE sf_state = 'pending' AND shardflow_status = 'mine'`); n != 2 {
		t.Fatalf("rows pending in sf_state with the user's column intact = %d; want 2", n)
	}
}

// v1DDL is a table as the first release's Migrate left it.
const v1DDL = `CREATE TABLE orders (id bigint PRIMARY KEY, payload text NOT NULL,
  bucket smallint GENERATED ALWAYS AS ((((id % 1024) + 1024) % 1024)::smallint) STORED,
  status text NOT NULL DEFAULT 'pending', claimed_by text, claim_epoch bigint, claimed_at timestamptz,
  attempts integer NOT NULL DEFAULT 0, last_error text);
CREATE INDEX orders_shardflow_work ON orders (status, bucket, id) WHERE status IN ('pending', 'claimed');
CREATE TABLE shardflow_fence (job text NOT NULL, item int NOT NULL, epoch bigint NOT NULL, PRIMARY KEY (job, item))`

func TestRenameLegacyColumnsKeepsEveryRowsState(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	exec(t, pool, v1DDL)
	exec(t, pool, `INSERT INTO orders (id, payload, status, attempts, last_error) SELECT g, 'p', CASE WHEN g <= 60 THEN 'done' WHEN g <= 70 THEN 'failed' ELSE 'pending' END,
  CASE WHEN g BETWEEN 61 AND 70 THEN 3 ELSE 0 END, CASE WHEN g BETWEEN 61 AND 70 THEN 'boom' END FROM generate_series(1, 100) g`)
	spec := postgres.TableSpec{Table: "orders"}
	if err := postgres.Migrate(ctx, pool, spec); !errors.Is(err, postgres.ErrLegacyColumns) || !strings.Contains(err.Error(), "RenameLegacyColumns") {
		t.Fatalf("Migrate on a first-release table: %v; want ErrLegacyColumns naming RenameLegacyColumns", err)
	}
	if _, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec}); !errors.Is(err, postgres.ErrLegacyColumns) {
		t.Fatalf("NewSource on a first-release table: %v; want ErrLegacyColumns", err)
	}
	if err := postgres.RenameLegacyColumns(ctx, pool, spec); err != nil {
		t.Fatal(err)
	}
	if err := postgres.RenameLegacyColumns(ctx, pool, spec); !errors.Is(err, postgres.ErrConfig) {
		t.Fatalf("second RenameLegacyColumns: %v; want ErrConfig (nothing to upgrade)", err)
	}
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { return nil })
	got, err := job.Fetch(ctx, shard(0, 1, 1000, 1))
	if err != nil || len(got) != 30 {
		t.Fatalf("Fetch after RenameLegacyColumns = %d rows, %v; want the 30 pending ones", len(got), err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'failed' AND shardflow_attempts = 3 AND shardflow_last_error = 'boom'`); n != 10 {
		t.Fatalf("failed rows kept = %d; want 10", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'orders_shardflow_queue'`); n != 1 {
		t.Fatal("index not renamed to orders_shardflow_queue")
	}
}

func TestNewSourceNamesAFieldThatCannotHoldItsColumn(t *testing.T) {
	pool := newDB(t)
	exec(t, pool, `CREATE TABLE events (id bigint PRIMARY KEY, created_at bigint NOT NULL, note text, amount numeric)`)
	if err := postgres.Migrate(testCtx(t), pool, postgres.TableSpec{Table: "events"}); err != nil {
		t.Fatal(err)
	}
	type meta struct {
		Note string
	}
	type event struct {
		ID        int64
		CreatedAt time.Time
		meta
		Amount bool
	}
	_, err := postgres.NewSource[event](testCtx(t), postgres.Config{Pool: pool, Table: postgres.TableSpec{Table: "events"}})
	if !errors.Is(err, postgres.ErrRowMismatch) {
		t.Fatalf("err = %v; want ErrRowMismatch", err)
	}
	t.Log(err)
	for _, m := range []string{"event.CreatedAt", "time.Time", `"created_at"`, "bigint", "event.Amount", "bool", "numeric"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %s", err, m)
		}
	}
	if strings.Contains(err.Error(), "Note") || strings.Contains(err.Error(), "event.ID") {
		t.Errorf("error %q names a field that matches", err)
	}
	type good struct {
		ID        int64
		CreatedAt int64
		Note      *string
		Amount    float64
	}
	if _, err := postgres.NewSource[good](testCtx(t), postgres.Config{Pool: pool, Table: postgres.TableSpec{Table: "events"}}); err != nil {
		t.Fatalf("matching types: %v", err)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/sources/postgres"
)

// firstReleaseInvoices is the table as the first release left it
// after the mistyped sink: 1,000 rows failed on settlementz, 5 failed on
// their own data, 10 done.
const firstReleaseInvoices = `
CREATE TABLE invoices (id bigint PRIMARY KEY, amount bigint NOT NULL,
  bucket smallint GENERATED ALWAYS AS ((((id % 1024) + 1024) % 1024)::smallint) STORED,
  status text NOT NULL DEFAULT 'pending', claimed_by text, claim_epoch bigint, claimed_at timestamptz,
  attempts integer NOT NULL DEFAULT 0, last_error text);
CREATE INDEX invoices_shardflow_work ON invoices (status, bucket, id) WHERE status IN ('pending', 'claimed');
INSERT INTO invoices (id, amount, status, attempts, last_error)
  SELECT g, 100, 'failed', 3, 'ERROR: relation "settlementz" does not exist (SQLSTATE 42P01)' FROM generate_series(1, 1000) g;
INSERT INTO invoices (id, amount, status, attempts, last_error)
  SELECT g, -1, 'failed', 3, 'amount must be positive' FROM generate_series(1001, 1005) g;
INSERT INTO invoices (id, amount, status, attempts) SELECT g, 100, 'done', 1 FROM generate_series(1006, 1015) g`

func TestFailedCommand(t *testing.T) {
	dsn := integration.SharedPostgres(t).NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(t.Context(), firstReleaseInvoices); err != nil {
		t.Fatal(err)
	}
	count := func(where string) int {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM invoices WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cli := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"failed"}, args...), &out, &errb); code != wantCode {
			t.Fatalf("failed %v: exit %d, stdout %q, stderr %q; want exit %d", args, code, out.String(), errb.String(), wantCode)
		}
		return out.String() + errb.String()
	}

	if out := cli(1, "list", "--pg", dsn, "--table", "invoices"); !strings.Contains(out, "earlier build") || !strings.Contains(out, "RenameLegacyColumns") {
		t.Fatalf("list on a first-release table: %q; want the upgrade named", out)
	}
	cli(0, "upgrade-v1", "--pg", dsn, "--table", "invoices")
	out := cli(0, "list", "--pg", dsn, "--table", "invoices", "--limit", "3")
	if !strings.Contains(out, "ID") || !strings.Contains(out, `relation "settlementz" does not exist`) || !strings.Contains(out, "3 failed rows of invoices (the first 3") {
		t.Fatalf("list --limit 3:\n%s", out)
	}
	var rows []postgres.FailedRow
	if err := json.Unmarshal([]byte(cli(0, "list", "--pg", dsn, "--table", "invoices", "--json", "--error", "AMOUNT must")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || rows[0].Key != 1001 || rows[0].Attempts != 3 {
		t.Fatalf("list --json --error: %+v; want rows 1001..1005 with 3 attempts", rows)
	}
	cli(2, "requeue", "--pg", dsn, "--table", "invoices")                          // no selection
	cli(2, "requeue", "--pg", dsn, "--table", "invoices", "--all", "--id", "1001") // two selections
	cli(2, "list", "--pg", dsn)                                                    // no table
	if out := cli(0, "requeue", "--pg", dsn, "--table", "invoices", "--error", "settlementz"); !strings.Contains(out, "requeued 1000 failed rows of invoices") {
		t.Fatalf("requeue --error: %q", out)
	}
	if out := cli(0, "requeue", "--pg", dsn, "--table", "invoices", "--id", "1001,1002,1006"); !strings.Contains(out, "requeued 2 failed rows") {
		t.Fatalf("requeue --id: %q; want 2 (1006 is done, not failed)", out)
	}
	if p, f, d := count("shardflow_status = 'pending' AND shardflow_attempts = 0"), count("shardflow_status = 'failed'"), count("shardflow_status = 'done'"); p != 1002 || f != 3 || d != 10 {
		t.Fatalf("pending %d, failed %d, done %d; want 1002, 3, 10", p, f, d)
	}
	if out := cli(0, "requeue", "--pg", dsn, "--table", "invoices", "--all"); !strings.Contains(out, "requeued 3 failed rows") {
		t.Fatalf("requeue --all: %q", out)
	}
}

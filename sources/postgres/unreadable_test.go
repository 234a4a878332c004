package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

// Region is a business column with a scanner of its own, which refuses
// codes it does not know.
type Region string

// Scan implements sql.Scanner.
func (r *Region) Scan(src any) error {
	s, _ := src.(string)
	if s == "??" {
		return fmt.Errorf("unknown region code %q", s)
	}
	*r = Region(s)
	return nil
}

// Bill is the invoice: a customer read into a plain string.
type Bill struct {
	ID       int64
	Customer string
	Amount   int32
	Region   Region
}

// The rows that cannot be read into Bill, by key, and the column named.
var unreadable = map[int64]string{
	42: "customer", // NULL into a string
	77: "amount",   // 2^40 into an int32
	91: "region",   // the scanner refuses "??"
}

const billRows = 300

// newBills creates table name with billRows bills, the unreadable ones
// among them, migrated as spec says.
func newBills(t *testing.T, pool *pgxpool.Pool, spec postgres.TableSpec) {
	t.Helper()
	exec(t, pool, `CREATE TABLE `+spec.Table+` (id bigint PRIMARY KEY, customer text, amount bigint NOT NULL, region text NOT NULL)`)
	exec(t, pool, `INSERT INTO `+spec.Table+` SELECT g, 'c' || g, g, 'eu' FROM generate_series(1, $1::int) g`, billRows)
	exec(t, pool, `UPDATE `+spec.Table+` SET customer = NULL WHERE id = 42`)
	exec(t, pool, `UPDATE `+spec.Table+` SET amount = 1099511627776 WHERE id = 77`)
	exec(t, pool, `UPDATE `+spec.Table+` SET region = '??' WHERE id = 91`)
	if err := postgres.Migrate(context.Background(), pool, spec); err != nil {
		t.Fatal(err)
	}
}

// fixBills makes the unreadable rows readable.
func fixBills(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	exec(t, pool, `UPDATE `+table+` SET customer = 'fixed', amount = 1, region = 'eu' WHERE id IN (42, 77, 91)`)
}

// warnLog keeps the WARN records of sources/postgres.
type warnLog struct {
	mu      sync.Mutex
	records []map[string]any
}

func (h *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *warnLog) WithGroup(string) slog.Handler                { return h }
func (h *warnLog) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	h.mu.Lock()
	h.records = append(h.records, m)
	h.mu.Unlock()
	return nil
}

// with returns the records whose message contains msg.
func (h *warnLog) with(msg string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, r := range h.records {
		if strings.Contains(r["msg"].(string), msg) {
			out = append(out, r)
		}
	}
	return out
}

// processedLog counts, per key, how often the user's function got a row,
// and what it read.
type processedLog struct {
	mu    sync.Mutex
	times map[int64]int
	last  map[int64]Bill
}

func (p *processedLog) add(bs ...Bill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.times == nil {
		p.times, p.last = map[int64]int{}, map[int64]Bill{}
	}
	for _, b := range bs {
		p.times[b.ID]++
		p.last[b.ID] = b
	}
}

// check: every row processed exactly once, the unreadable ones as fixed
// (or not at all, before the fix).
func (p *processedLog) check(t *testing.T, fixed bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := int64(1); id <= billRows; id++ {
		_, bad := unreadable[id]
		want := 1
		if bad && !fixed {
			want = 0
		}
		if p.times[id] != want {
			t.Fatalf("row %d processed %d times; want %d (fixed %v)", id, p.times[id], want, fixed)
		}
		if bad && fixed && p.last[id].Customer != "fixed" {
			t.Fatalf("row %d processed as %+v; want its fixed values", id, p.last[id])
		}
	}
}

// drainBills fetches and processes item 0 of 1 until a fetch is empty,
// each batch in two slices; it returns the rows processed and failed. The
// unreadable rows must come with their ReadError until fixed.
func drainBills(t *testing.T, fixed bool, fetch func() ([]postgres.Row[Bill], error), process func([]postgres.Row[Bill]) (int, error)) (done, failed int) {
	t.Helper()
	for range 100 {
		got, err := fetch()
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		if len(got) == 0 {
			return done, failed
		}
		for _, r := range got {
			col, bad := unreadable[r.Key]
			bad = bad && !fixed
			var re *postgres.ReadError
			if bad != errors.As(r.Err(), &re) || bad && re.Column != col {
				t.Fatalf("row %d fetched with Err %v; want a ReadError naming %q: %v", r.Key, r.Err(), col, bad)
			}
		}
		half := len(got) / 2
		for _, slice := range [][]postgres.Row[Bill]{got[:half], got[half:]} {
			n, err := process(slice)
			if err != nil {
				t.Fatalf("ProcessBatch: %v", err)
			}
			done += n
			failed += len(slice) - n
		}
	}
	t.Fatal("still rows after 100 fetches")
	return 0, 0
}

func billSource(t *testing.T, pool *pgxpool.Pool, spec postgres.TableSpec, logs *warnLog) *postgres.Source[Bill] {
	t.Helper()
	src, err := postgres.NewSource[Bill](context.Background(), postgres.Config{Pool: pool, Table: spec, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// checkNullWarning: NewSource warned (once) that customer, nullable, maps
// to a string, and said the fix.
func checkNullWarning(t *testing.T, src *postgres.Source[Bill], logs *warnLog) {
	t.Helper()
	if got := src.NullableRisks(); !slices.Equal(got, []string{"customer"}) {
		t.Fatalf("NullableRisks = %v; want [customer]", got)
	}
	ws := logs.with("nullable column")
	if len(ws) != 1 || ws[0]["column"] != "customer" || ws[0]["field"] != "Bill.Customer" || !strings.Contains(ws[0]["msg"].(string), "NOT NULL") {
		t.Fatalf("nullable warnings %v; want one naming column customer, field Bill.Customer and the fix", ws)
	}
}

// The case in claim mode: an invoice with a NULL customer (and
// two other unreadable rows) is set aside as failed with its column named,
// every other row is done once, and after the fix and a requeue the rows
// are processed once.
func TestClaimSetsAsideARowThatCannotBeRead(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	spec := postgres.TableSpec{Table: "bills"}
	newBills(t, pool, spec)
	logs := &warnLog{}
	src := billSource(t, pool, spec, logs)
	checkNullWarning(t, src, logs)
	var seen processedLog
	job := src.Claim(func(_ context.Context, _ dataflowShard, b Bill) error { seen.add(b); return nil })
	s := shard(0, 1, 40, 1)
	done, failed := drainBills(t, false, func() ([]postgres.Row[Bill], error) { return job.Fetch(ctx, s) },
		func(rows []postgres.Row[Bill]) (int, error) { return job.ProcessBatch(ctx, s, rows) })
	if done != billRows-3 || failed != 3 {
		t.Fatalf("%d done, %d failed; want %d and 3", done, failed, billRows-3)
	}
	seen.check(t, false)
	checkListedFailed(t, pool, spec)
	if n := len(logs.with("set aside, the item goes on")); n != 3 {
		t.Fatalf("%d set-aside warnings; want one per unreadable row", n)
	}
	fixBills(t, pool, spec.Table)
	if n, err := postgres.Requeue(ctx, pool, spec, postgres.FailedFilter{}); err != nil || n != 3 {
		t.Fatalf("Requeue = %d, %v; want 3", n, err)
	}
	done, failed = drainBills(t, true, func() ([]postgres.Row[Bill], error) { return job.Fetch(ctx, s) },
		func(rows []postgres.Row[Bill]) (int, error) { return job.ProcessBatch(ctx, s, rows) })
	if done != 3 || failed != 0 {
		t.Fatalf("after the fix: %d done, %d failed; want 3 and 0", done, failed)
	}
	seen.check(t, true)
	if n := queryInt(t, pool, `SELECT count(*) FROM bills WHERE shardflow_status = 'done'`); n != billRows {
		t.Fatalf("%d rows done; want all %d", n, billRows)
	}
}

// checkListedFailed: ListFailed lists exactly the unreadable rows, each
// with its key and column named in its error.
func checkListedFailed(t *testing.T, pool *pgxpool.Pool, spec postgres.TableSpec) {
	t.Helper()
	rows, err := postgres.ListFailed(testCtx(t), pool, spec, postgres.FailedFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(unreadable) {
		t.Fatalf("failed rows %+v; want the %d unreadable ones", rows, len(unreadable))
	}
	for _, r := range rows {
		col := unreadable[r.Key]
		if col == "" || !strings.Contains(r.LastError, fmt.Sprintf("row %d of table %s: column %s cannot be read", r.Key, spec.Table, col)) {
			t.Fatalf("failed row %+v; want row %d's error naming column %q", r, r.Key, col)
		}
	}
	if !strings.Contains(rows[0].LastError, "cannot scan NULL into *string") {
		t.Fatalf("row 42's error %q; want pgx's cause", rows[0].LastError)
	}
}

// The same in transactional mode: the effects of the readable rows commit
// once, the unreadable rows are failed in a fenced transaction of their
// own, then fixed, requeued and committed once.
func TestTransactionalSetsAsideARowThatCannotBeRead(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	spec := postgres.TableSpec{Table: "bills"}
	newBills(t, pool, spec)
	exec(t, pool, `CREATE TABLE bill_effects (bill_id bigint NOT NULL)`)
	logs := &warnLog{}
	src := billSource(t, pool, spec, logs)
	checkNullWarning(t, src, logs)
	var seen processedLog
	job := src.Transactional(func(ctx context.Context, tx pgx.Tx, _ dataflowShard, bills []Bill) error {
		seen.add(bills...)
		for _, b := range bills {
			if _, err := tx.Exec(ctx, `INSERT INTO bill_effects VALUES ($1)`, b.ID); err != nil {
				return err
			}
		}
		return nil
	})
	s := shard(0, 1, 40, 1)
	done, failed := drainBills(t, false, func() ([]postgres.Row[Bill], error) { return job.Fetch(ctx, s) },
		func(rows []postgres.Row[Bill]) (int, error) { return job.ProcessBatch(ctx, s, rows) })
	if done != billRows-3 || failed != 3 {
		t.Fatalf("%d done, %d failed; want %d and 3", done, failed, billRows-3)
	}
	seen.check(t, false)
	checkListedFailed(t, pool, spec)
	fixBills(t, pool, spec.Table)
	if n, err := postgres.Requeue(ctx, pool, spec, postgres.FailedFilter{Keys: []int64{42, 77, 91}}); err != nil || n != 3 {
		t.Fatalf("Requeue = %d, %v; want 3", n, err)
	}
	if done, _ := drainBills(t, true, func() ([]postgres.Row[Bill], error) { return job.Fetch(ctx, s) },
		func(rows []postgres.Row[Bill]) (int, error) { return job.ProcessBatch(ctx, s, rows) }); done != 3 {
		t.Fatalf("after the fix: %d done; want 3", done)
	}
	seen.check(t, true)
	if n := queryInt(t, pool, `SELECT count(*) FROM (SELECT bill_id FROM bill_effects GROUP BY bill_id HAVING count(*) = 1) e`); n != billRows {
		t.Fatalf("%d bills with exactly one effect; want %d", n, billRows)
	}
}

// Checkpoint mode: the unreadable rows go to the dead-letter table with
// their column named, and the checkpoint moves past them with the rest.
func TestCheckpointDeadLettersARowThatCannotBeRead(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	spec := postgres.TableSpec{Table: "bills", ReadOnly: true}
	newBills(t, pool, spec)
	logs := &warnLog{}
	src := billSource(t, pool, spec, logs)
	checkNullWarning(t, src, logs)
	var seen processedLog
	job := src.Checkpoint(func(_ context.Context, _ pgx.Tx, _ dataflowShard, bills []Bill) error { seen.add(bills...); return nil })
	s := shard(0, 1, 40, 1)
	done, failed := drainBills(t, false, func() ([]postgres.Row[Bill], error) { return job.Fetch(ctx, s) },
		func(rows []postgres.Row[Bill]) (int, error) { return job.ProcessBatch(ctx, s, rows) })
	if done != billRows-3 || failed != 3 {
		t.Fatalf("%d done, %d failed; want %d and 3", done, failed, billRows-3)
	}
	seen.check(t, false)
	rows, err := pool.Query(ctx, `SELECT key, error FROM shardflow_dead_letter WHERE job = 'job' ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	type dead struct {
		Key   int64
		Error string
	}
	dl, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dead])
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 3 {
		t.Fatalf("dead letters %+v; want the 3 unreadable rows", dl)
	}
	for _, d := range dl {
		if !strings.Contains(d.Error, fmt.Sprintf("row %d of table bills: column %s cannot be read", d.Key, unreadable[d.Key])) {
			t.Fatalf("dead letter %+v; want its column %q named", d, unreadable[d.Key])
		}
	}
}

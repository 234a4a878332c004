package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
)

// Config configures a Source. Zero fields take the stated defaults.
type Config struct {
	// Pool is the connection pool; required. The Source does not close it.
	// Connect opens one with a bounded, host-naming connection check.
	Pool *pgxpool.Pool
	// Table names the table, its key and the columns scanned into T.
	Table TableSpec
	// Lease is how long a claim (claim mode) is honoured before the item's
	// owner reclaims the row, whoever claimed it. Claims by another server
	// or another epoch are reclaimed at once. Default 5m.
	Lease time.Duration
	// MaxAttempts is how many times a row is processed before it is marked
	// 'failed' (work tables) or dead-lettered (checkpoint mode). Default 3.
	MaxAttempts int
	// MaxBackoff caps the backoff after statement errors (see Classify:
	// undefined table, insufficient privilege, lost connection, disk
	// full...). Such an error consumes no row attempt: the item waits
	// 250ms, then twice as long at each further failure up to MaxBackoff
	// (with jitter), and retries, until the statements succeed or the run
	// loses its item or is stopped. Default 30s.
	MaxBackoff time.Duration
	// Logger receives one ERROR line per backoff step, and the rows another
	// owner took. Default slog.Default().
	Logger *slog.Logger
}

// Row is one fetched row: its key and its other columns scanned into T.
// It is the item type of every job the Source returns.
type Row[T any] struct {
	// Key is the row's key column.
	Key int64
	// Value is the row scanned with pgx.RowToStructByName.
	Value T
	// readErr: a column of the row could not be read into Value; the
	// Source's jobs set the row aside instead of processing it.
	readErr *ReadError
	// tid is the ctid of the row's version as claimed (claim mode): its
	// done mark finds it without an index descent. Invalid when unknown.
	tid pgtype.TID
}

// Err returns the *ReadError of a row a column of which could not be read
// into T (Value is then incomplete), nil for a row read whole. The jobs of
// the Source never hand such a row to the user's function: they set it
// aside (see ReadError).
func (r Row[T]) Err() error {
	if r.readErr == nil {
		return nil
	}
	return r.readErr
}

// Source reads rows of one table into T. Build it with NewSource; it is
// safe for concurrent use and owns no goroutine.
type Source[T any] struct {
	cfg    Config
	spec   TableSpec
	cols   []string // columns scanned into T, resolved by Validate
	fields [][]int  // index path of the field of T of each column of cols
	// nullRisks are the nullable columns whose field cannot hold NULL
	// (warned about by Validate).
	nullRisks []string
	sql       statements

	backoff backoffs // per job and item: statement errors being backed off

	// guards and origin: the fencing check in a database shared with
	// coord/pgstore (sharedfence.go).
	guards    guards
	origin    dbOrigin
	fenceMode atomic.Int32 // fenceUnknown, fencePlain or fenceGuarded
	// fenced: the epochs this source committed in shardflow_fence.
	fenced fencedEpochs
}

// NewSource fills in cfg's defaults, validates it, and runs Validate: the
// table, the key, the bookkeeping columns, the fencing tables and the
// columns of T must exist and match, or an error names what is missing. A
// nullable column whose field cannot hold NULL is not refused: NewSource
// logs a warning naming the column, the field and the fix
// (NullableRisks lists them), and a row holding NULL there is set aside
// when read (ReadError).
func NewSource[T any](ctx context.Context, cfg Config) (*Source[T], error) {
	if cfg.Pool == nil {
		return nil, fmt.Errorf("%w: Config.Pool is nil; open one with postgres.Connect", ErrConfig)
	}
	cfg.Table = cfg.Table.withDefaults()
	if err := cfg.Table.validate(); err != nil {
		return nil, err
	}
	if cfg.Lease == 0 {
		cfg.Lease = 5 * time.Minute
	}
	if cfg.Lease < 0 {
		return nil, fmt.Errorf("%w: Config.Lease is negative (%s); use a positive duration or 0 for 5m", ErrConfig, cfg.Lease)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: Config.MaxAttempts is negative (%d); use a positive count or 0 for 3", ErrConfig, cfg.MaxAttempts)
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.MaxBackoff < firstBackoff {
		return nil, fmt.Errorf("%w: Config.MaxBackoff is %s; use at least %s, or 0 for 30s", ErrConfig, cfg.MaxBackoff, firstBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Source[T]{cfg: cfg, spec: cfg.Table}
	if err := s.Validate(ctx); err != nil {
		return nil, err
	}
	s.sql = buildStatements(s.spec, s.cols)
	return s, nil
}

// Columns returns the columns scanned into T, in order.
func (s *Source[T]) Columns() []string { return append([]string(nil), s.cols...) }

// NullableRisks returns the nullable columns (no NOT NULL) whose field of
// T cannot hold NULL, in column order: NewSource logs a warning for each
// (see ReadError for what happens to a row with NULL there).
func (s *Source[T]) NullableRisks() []string { return append([]string(nil), s.nullRisks...) }

// Validate checks, before any run, that the table exists, that the key and
// the bookkeeping columns exist and were created by Migrate, that a work
// table has Migrate's two indexes (the queue and the pending index), that
// the fencing tables exist, and that the selected columns match the fields
// of T, each field's Go type able to hold its column's SQL type. Errors
// wrap ErrMissingTable, ErrMissingColumn, ErrColumnTaken, ErrLegacyColumns,
// ErrMissingIndex or ErrRowMismatch and name the table, column, index or
// field with the fix.
func (s *Source[T]) Validate(ctx context.Context) error {
	pool := s.cfg.Pool
	info, err := readTable(ctx, pool, s.spec)
	if err != nil {
		return err
	}
	col, ok := info.cols[s.spec.Key]
	if !ok {
		return fmt.Errorf("%w: key column %q of table %s (set TableSpec.Key to the table's bigint unique key)", ErrMissingColumn, s.spec.Key, s.spec.Table)
	}
	if col.typ != "bigint" && col.typ != "integer" && col.typ != "smallint" {
		return fmt.Errorf("%w: TableSpec.Key %q of table %s has type %s; the key must be an integer column (bigint)", ErrConfig, s.spec.Key, s.spec.Table, col.typ)
	}
	missing, err := info.checkBookkeeping(s.spec)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: bookkeeping column %q of table %s; run postgres.Migrate(ctx, pool, spec) with this TableSpec",
			ErrMissingColumn, missing[0].name, s.spec.Table)
	}
	if !s.spec.ReadOnly {
		for _, idx := range []struct{ name, ddl, use string }{
			{workIndex, queueIndexDDL(s.spec, true), "the claim mode finds abandoned claims by it"},
			{pendingIndex, pendingIndexDDL(s.spec, true), "the claim and transactional modes read pending rows by it"},
		} {
			if name := indexName(s.spec.name(), idx.name); !info.indexes[name] {
				return fmt.Errorf("%w: index %s of table %s (%s); run postgres.Migrate(ctx, pool, spec) again, "+
					"or, on a large table, without blocking its writes: %s", ErrMissingIndex, name, s.spec.Table, idx.use, idx.ddl)
			}
		}
	}
	cols := s.spec.Columns
	if len(cols) == 0 {
		for _, c := range info.order {
			if !s.spec.isBookkeeping(c) {
				cols = append(cols, c)
			}
		}
	}
	for _, c := range cols {
		if _, ok := info.cols[c]; !ok {
			return fmt.Errorf("%w: column %q of table %s named in TableSpec.Columns", ErrMissingColumn, c, s.spec.Table)
		}
	}
	fences := []string{fenceTable}
	if s.spec.ReadOnly {
		fences = append(fences, checkpointTable, "shardflow_dead_letter")
	}
	for _, f := range fences {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, f).Scan(&ok); err != nil {
			return fmt.Errorf("sources/postgres: looking up table %s: %w", f, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s (the fencing table); run postgres.Migrate or postgres.MigrateFencing", ErrMissingTable, f)
		}
	}
	s.cols = cols
	return s.checkType(ctx, info)
}

// collect reads rows whose first column is the key and whose other
// columns are s.cols, scanning each straight into the fields of its T
// (s.fields, resolved once by Validate with pgx's RowToStructByName rules)
// rather than matching names again for every row. A value that cannot be
// read into its field sets that row's readErr (naming the column and the
// row's key) and the other rows are read on: one bad row must not stop
// the rest of the item. Values are decoded from the rows' raw values with
// scan plans made once per column, since rows.Scan ends the whole result
// at the first value it cannot read.
func (s *Source[T]) collect(rows pgx.Rows) ([]Row[T], error) {
	defer rows.Close()
	var out []Row[T]
	fds := rows.FieldDescriptions()
	types := pgtypeMap(rows)
	// A trailing ctid column (the claim's RETURNING) is each row's tid.
	cols := 1 + len(s.fields)
	withTID := len(fds) == cols+1 && fds[cols].Name == "ctid"
	plans := make([]pgtype.ScanPlan, cols, cols+1)
	if withTID {
		plans = plans[:cols+1]
	}
	scan := func(i int, raw []byte, dest any) error {
		if plans[i] == nil {
			plans[i] = types.PlanScan(fds[i].DataTypeOID, fds[i].Format, dest)
		}
		return plans[i].Scan(raw, dest)
	}
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != len(plans) || len(fds) != len(plans) {
			return nil, fmt.Errorf("%w: table %s: a row of %d columns, want the key and %d", ErrRowMismatch, s.spec.Table, len(raw), len(s.fields))
		}
		out = append(out, Row[T]{})
		r := &out[len(out)-1]
		if withTID && scan(cols, raw[cols], &r.tid) != nil {
			r.tid = pgtype.TID{} // the done mark finds the row by key
		}
		if err := scan(0, raw[0], &r.Key); err != nil {
			return nil, fmt.Errorf("%w: scanning the key column %q of table %s: %w", ErrRowMismatch, s.spec.Key, s.spec.Table, err)
		}
		v := reflect.ValueOf(&r.Value).Elem()
		for i, path := range s.fields {
			if err := scan(i+1, raw[i+1], v.FieldByIndex(path).Addr().Interface()); err != nil {
				r.readErr = &ReadError{Table: s.spec.Table, Key: r.Key, Column: fds[i+1].Name, Field: fieldName(v.Type(), path), Err: err}
				break
			}
		}
	}
	return out, rows.Err()
}

// pgtypeMap is the type map of rows' connection (its registered types).
func pgtypeMap(rows pgx.Rows) *pgtype.Map {
	if c := rows.Conn(); c != nil {
		return c.TypeMap()
	}
	return pgtype.NewMap()
}

// fieldName names the field of struct type t at path, "Invoice.Customer".
func fieldName(t reflect.Type, path []int) string {
	name := t.Name()
	for _, i := range path {
		f := t.Field(i)
		name += "." + f.Name
		t = f.Type
	}
	return name
}

// selectList is "alias.key, alias.col, ..." for cols, quoted.
func selectList(cols []string, alias string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		if alias != "" {
			b.WriteString(alias + ".")
		}
		b.WriteString(quote(c))
	}
	return b.String()
}

// keys returns the keys of rows.
func keys[T any](rows []Row[T]) []int64 {
	ks := make([]int64, len(rows))
	for i, r := range rows {
		ks[i] = r.Key
	}
	return ks
}

func values[T any](rows []Row[T]) []T {
	vs := make([]T, len(rows))
	for i, r := range rows {
		vs[i] = r.Value
	}
	return vs
}

// bucketOf is the generated column's formula, in Go.
func bucketOf(key int64) int { return int(((key % NumBuckets) + NumBuckets) % NumBuckets) }

// fallbackOwner is claimed_by for a Shard without a ServerID (one built by
// hand rather than by a Node): this process, hostname:pid.
var fallbackOwner = func() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid())
}()

// owner is the server id written to claimed_by for shard: the Node's
// (Shard.ServerID), which in claim mode guards the done marks and in the
// other modes records who committed.
func owner(shard dataflow.Shard) string {
	if shard.ServerID != "" {
		return shard.ServerID
	}
	return fallbackOwner
}

package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// NumBuckets is the number of buckets rows are spread over. Shard items own
// contiguous ranges of buckets, so at most NumBuckets items have rows.
const NumBuckets = 1024

// Default names of the bookkeeping columns (Bookkeeping documents each).
const (
	colBucket     = "shardflow_bucket"
	colStatus     = "shardflow_status"
	colClaimedBy  = "shardflow_claimed_by"
	colClaimEpoch = "shardflow_claim_epoch"
	colClaimedAt  = "shardflow_claimed_at"
	colAttempts   = "shardflow_attempts"
	colLastError  = "shardflow_last_error"
)

// Row statuses: the values of the status column (Bookkeeping.Status).
const (
	StatusPending = "pending"
	StatusClaimed = "claimed"
	StatusDone    = "done"
	StatusFailed  = "failed"
)

// Tables of the fencing protocol and the checkpoint mode, created by
// MigrateFencing (which Migrate calls).
const (
	fenceTable      = "shardflow_fence"
	checkpointTable = "shardflow_checkpoint"
)

// Bookkeeping names the bookkeeping columns Migrate adds to a work table.
// Zero fields take the defaults, whose shardflow_ prefix keeps them clear of
// the business columns a table already has (status, attempts, bucket...).
// The source writes only these columns of the user's table, and only once
// Migrate has created them (marked with a comment, see Migrate): a column of
// one of these names that Migrate did not create is refused, never adopted.
type Bookkeeping struct {
	// Bucket: smallint, generated from the key; the only one of a ReadOnly
	// table. Default "shardflow_bucket".
	Bucket string
	// Status: 'pending', 'claimed', 'done' or 'failed' (StatusPending ...).
	// Default "shardflow_status".
	Status string
	// ClaimedBy: the server id of the claimer (claim mode) or committer.
	// Default "shardflow_claimed_by".
	ClaimedBy string
	// ClaimEpoch: the fencing epoch of that claim. Default
	// "shardflow_claim_epoch".
	ClaimEpoch string
	// ClaimedAt: when claimed (the claim mode's lease), done or failed.
	// Default "shardflow_claimed_at".
	ClaimedAt string
	// Attempts: processing attempts so far. Default "shardflow_attempts".
	Attempts string
	// LastError: the last processing error's text. Default
	// "shardflow_last_error".
	LastError string
}

func (b Bookkeeping) withDefaults() Bookkeeping {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&b.Bucket, colBucket)
	def(&b.Status, colStatus)
	def(&b.ClaimedBy, colClaimedBy)
	def(&b.ClaimEpoch, colClaimEpoch)
	def(&b.ClaimedAt, colClaimedAt)
	def(&b.Attempts, colAttempts)
	def(&b.LastError, colLastError)
	return b
}

// bookColumn is one bookkeeping column: its role (the field of
// Bookkeeping, the word in its marker comment), its name and its DDL.
type bookColumn struct {
	role, name, ddl string
}

// columns returns the bookkeeping columns a table of spec needs.
func (s TableSpec) columns() []bookColumn {
	b := s.Bookkeeping
	bucket := fmt.Sprintf(`smallint GENERATED ALWAYS AS ((((%s %% %d) + %d) %% %d)::smallint) STORED`,
		quote(s.Key), NumBuckets, NumBuckets, NumBuckets)
	cols := []bookColumn{{"Bucket", b.Bucket, bucket}}
	if s.ReadOnly {
		return cols
	}
	return append(cols,
		bookColumn{"Status", b.Status, `text NOT NULL DEFAULT 'pending'`},
		bookColumn{"ClaimedBy", b.ClaimedBy, `text`},
		bookColumn{"ClaimEpoch", b.ClaimEpoch, `bigint`},
		bookColumn{"ClaimedAt", b.ClaimedAt, `timestamptz`},
		bookColumn{"Attempts", b.Attempts, `integer NOT NULL DEFAULT 0`},
		bookColumn{"LastError", b.LastError, `text`},
	)
}

// TableSpec names the user's table.
type TableSpec struct {
	// Table is the table name, optionally schema-qualified ("sales.orders").
	// Required. It is quoted with pgx.Identifier.Sanitize, so it is
	// case-sensitive as written.
	Table string
	// Key is the key column: bigint (or integer), unique, not null.
	// Default "id".
	Key string
	// Columns are the columns scanned into the item type T. Default: every
	// column of the table except the bookkeeping columns.
	Columns []string
	// Bookkeeping names the bookkeeping columns; zero fields take the
	// shardflow_-prefixed defaults (see Bookkeeping).
	Bookkeeping Bookkeeping
	// ReadOnly marks a table read by the checkpoint mode: Migrate adds only
	// the bucket column and a (bucket, key) index, and Validate checks only
	// those. Default false: a work table with the status/claim columns.
	ReadOnly bool
}

func (s TableSpec) withDefaults() TableSpec {
	if s.Key == "" {
		s.Key = "id"
	}
	s.Bookkeeping = s.Bookkeeping.withDefaults()
	return s
}

// validate checks a spec that has its defaults.
func (s TableSpec) validate() error {
	if strings.TrimSpace(s.Table) == "" {
		return fmt.Errorf("%w: TableSpec.Table is empty; name the table to read", ErrConfig)
	}
	if len(strings.Split(s.Table, ".")) > 2 {
		return fmt.Errorf("%w: TableSpec.Table %q has more than one '.'; use table or schema.table", ErrConfig, s.Table)
	}
	for i, c := range s.Columns {
		if c == "" {
			return fmt.Errorf("%w: TableSpec.Columns[%d] is empty", ErrConfig, i)
		}
	}
	seen := map[string]string{s.Key: "TableSpec.Key"}
	for _, c := range s.columns() {
		field := "TableSpec.Bookkeeping." + c.role
		if prev, dup := seen[c.name]; dup {
			return fmt.Errorf("%w: %s and %s are both %q; give every bookkeeping column its own name", ErrConfig, prev, field, c.name)
		}
		seen[c.name] = field
		if len(c.name) > 63 {
			return fmt.Errorf("%w: %s %q is longer than Postgres's 63-byte limit", ErrConfig, field, c.name)
		}
	}
	for _, c := range s.Columns {
		if f, ok := seen[c]; ok && f != "TableSpec.Key" {
			return fmt.Errorf("%w: TableSpec.Columns names %q, which is %s; the item type cannot scan a bookkeeping column", ErrConfig, c, f)
		}
	}
	return nil
}

// isBookkeeping reports whether col is one of spec's bookkeeping columns.
func (s TableSpec) isBookkeeping(col string) bool {
	for _, c := range s.columns() {
		if c.name == col {
			return true
		}
	}
	return false
}

// ident is the table's identifier, split on '.'.
func (s TableSpec) ident() pgx.Identifier { return pgx.Identifier(strings.Split(s.Table, ".")) }

// name is the unqualified table name.
func (s TableSpec) name() string { id := s.ident(); return id[len(id)-1] }

func quote(col string) string { return pgx.Identifier{col}.Sanitize() }

// BucketRange returns the buckets [lo, hi] (both inclusive) owned by shard
// item of total: [item*NumBuckets/total, (item+1)*NumBuckets/total - 1].
// An item of a total larger than NumBuckets may own no bucket; then
// ok is false.
func BucketRange(item, total int) (lo, hi int, ok bool) {
	if total <= 0 || item < 0 || item >= total {
		return 0, -1, false
	}
	lo = item * NumBuckets / total
	hi = (item+1)*NumBuckets/total - 1
	return lo, hi, hi >= lo
}

// Querier is what Migrate, MigrateFencing and the failed-rows functions
// need: *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// indexName keeps Postgres's 63-byte identifier limit.
func indexName(table, suffix string) string {
	n := table + "_" + suffix
	if len(n) > 63 {
		n = table[:63-len(suffix)-1] + "_" + suffix
	}
	return n
}

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

// Names of the bookkeeping columns Migrate adds to a work table.
const (
	ColBucket     = "bucket"      // smallint, generated from the key
	ColStatus     = "status"      // 'pending' | 'claimed' | 'done' | 'failed'
	ColClaimedBy  = "claimed_by"  // server id of the claimer (claim mode) or committer
	ColClaimEpoch = "claim_epoch" // fencing epoch of that claim
	ColClaimedAt  = "claimed_at"  // when claimed (claim mode lease) or done
	ColAttempts   = "attempts"    // processing attempts so far
	ColLastError  = "last_error"  // the last processing error's text
)

// Row statuses.
const (
	StatusPending = "pending"
	StatusClaimed = "claimed"
	StatusDone    = "done"
	StatusFailed  = "failed"
)

// Tables of the fencing protocol, created by Migrate.
const (
	FenceTable      = "shardflow_fence"
	CheckpointTable = "shardflow_checkpoint"
)

var bookkeeping = map[string]bool{
	ColBucket: true, ColStatus: true, ColClaimedBy: true, ColClaimEpoch: true,
	ColClaimedAt: true, ColAttempts: true, ColLastError: true,
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
	// column of the table except the bookkeeping columns (ColBucket ...
	// ColLastError).
	Columns []string
	// ReadOnly marks a table read by the checkpoint mode: Migrate adds only
	// the bucket column and a (bucket, key) index, and Validate checks only
	// those. Default false: a work table with the status/claim columns.
	ReadOnly bool
}

func (s TableSpec) withDefaults() TableSpec {
	if s.Key == "" {
		s.Key = "id"
	}
	return s
}

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
	return nil
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

// Execer is what Migrate needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate prepares spec's table for a source and creates the fencing
// tables. It is idempotent. For a work table it adds (if missing):
//
//	bucket      smallint GENERATED ALWAYS AS ((((key % 1024) + 1024) % 1024)::smallint) STORED
//	status      text NOT NULL DEFAULT 'pending'
//	claimed_by  text, claim_epoch bigint, claimed_at timestamptz
//	attempts    integer NOT NULL DEFAULT 0, last_error text
//
// and the partial index (status, bucket, key) WHERE status IN
// ('pending','claimed') that every claim, fetch and reclaim query uses.
// For a ReadOnly table it adds only bucket and a (bucket, key) index.
// Adding a stored generated column rewrites the table: run Migrate in a
// maintenance window on a large table, or create the columns in the
// table's DDL (see examples/pgbatch).
func Migrate(ctx context.Context, db Execer, spec TableSpec) error {
	spec = spec.withDefaults()
	if err := spec.validate(); err != nil {
		return err
	}
	t, k := spec.ident().Sanitize(), quote(spec.Key)
	stmts := []string{
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s smallint GENERATED ALWAYS AS ((((%s %% %d) + %d) %% %d)::smallint) STORED`,
			t, ColBucket, k, NumBuckets, NumBuckets, NumBuckets),
	}
	if spec.ReadOnly {
		stmts = append(stmts, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s)`,
			quote(indexName(spec.name(), "shardflow_keyset")), t, ColBucket, k))
	} else {
		stmts = append(stmts,
			fmt.Sprintf(`ALTER TABLE %s
  ADD COLUMN IF NOT EXISTS %s text NOT NULL DEFAULT 'pending',
  ADD COLUMN IF NOT EXISTS %s text,
  ADD COLUMN IF NOT EXISTS %s bigint,
  ADD COLUMN IF NOT EXISTS %s timestamptz,
  ADD COLUMN IF NOT EXISTS %s integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS %s text`, t, ColStatus, ColClaimedBy, ColClaimEpoch, ColClaimedAt, ColAttempts, ColLastError),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s, %s) WHERE %s IN ('pending', 'claimed')`,
				quote(indexName(spec.name(), "shardflow_work")), t, ColStatus, ColBucket, k, ColStatus))
	}
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("sources/postgres: migrating table %s: %w", spec.Table, err)
		}
	}
	return MigrateFencing(ctx, db)
}

// MigrateFencing creates the shardflow_fence and shardflow_checkpoint tables
// if they are missing. Migrate calls it; call it alone for a database that
// only holds sinks fenced by FenceTx.
func MigrateFencing(ctx context.Context, db Execer) error {
	for _, s := range []string{
		`CREATE TABLE IF NOT EXISTS shardflow_fence (
  job   text   NOT NULL,
  item  int    NOT NULL,
  epoch bigint NOT NULL,
  PRIMARY KEY (job, item))`,
		// One row per bucket, not per item: a new ShardingTotalCount regroups
		// buckets into items and keeps every bucket's position.
		`CREATE TABLE IF NOT EXISTS shardflow_checkpoint (
  job        text     NOT NULL,
  bucket     smallint NOT NULL,
  key        bigint   NOT NULL,
  epoch      bigint   NOT NULL,
  attempts   int      NOT NULL DEFAULT 0,
  last_error text,
  PRIMARY KEY (job, bucket))`,
		`CREATE TABLE IF NOT EXISTS shardflow_dead_letter (
  job       text        NOT NULL,
  key       bigint      NOT NULL,
  error     text        NOT NULL,
  failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job, key))`,
	} {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("sources/postgres: creating the fencing tables: %w", err)
		}
	}
	return nil
}

// indexName keeps Postgres's 63-byte identifier limit.
func indexName(table, suffix string) string {
	n := table + "_" + suffix
	if len(n) > 63 {
		n = table[:63-len(suffix)-1] + "_" + suffix
	}
	return n
}

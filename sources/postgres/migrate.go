package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Migrate prepares spec's table for a source and creates the fencing
// tables. It is idempotent and safe to run from several processes at once.
// For a work table it adds the bookkeeping columns (named by
// spec.Bookkeeping, default):
//
//	shardflow_bucket      smallint GENERATED ALWAYS AS ((((key % 1024) + 1024) % 1024)::smallint) STORED
//	shardflow_status      text NOT NULL DEFAULT 'pending'
//	shardflow_claimed_by  text, shardflow_claim_epoch bigint, shardflow_claimed_at timestamptz
//	shardflow_attempts    integer NOT NULL DEFAULT 0, shardflow_last_error text
//
// each with a comment marking it as Migrate's ("shardflow:<role> ..."),
// the partial index (status, bucket, key) WHERE status IN
// ('pending','claimed') that the claim mode finds abandoned claims by, and
// the partial index (key, bucket) WHERE status = 'pending' that the claim
// and transactional modes read pending rows by, in key order (see
// pendingIndexDDL). For a ReadOnly table it adds only the bucket column and a (bucket, key) index.
// The defaults and the generated bucket make a plain INSERT that names no
// bookkeeping column a pending row of the right bucket.
//
// Migrate never adopts a column it did not create: if a column of one of
// the bookkeeping names exists without its marker, it returns an error
// wrapping ErrColumnTaken that names the column and the fix, and changes
// nothing. A table prepared by an earlier build wraps ErrLegacyColumns (see
// RenameLegacyColumns).
//
// Adding a stored generated column rewrites the table: on a large table
// run Migrate in a maintenance window.
func Migrate(ctx context.Context, db Querier, spec TableSpec) error {
	spec = spec.withDefaults()
	if err := spec.validate(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := migrateOnce(ctx, db, spec)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42701" || pgErr.Code == "23505") && attempt < 2 {
			// Another process added the columns or an index meanwhile: look again.
			continue
		}
		if err != nil {
			return err
		}
		return MigrateFencing(ctx, db)
	}
}

func migrateOnce(ctx context.Context, db Querier, spec TableSpec) error {
	info, err := readTable(ctx, db, spec)
	if err != nil {
		return err
	}
	missing, err := info.checkBookkeeping(spec)
	if err != nil {
		return err
	}
	t, k, b := spec.ident().Sanitize(), quote(spec.Key), spec.Bookkeeping
	var stmts []string
	if len(missing) > 0 {
		adds := make([]string, len(missing))
		for i, c := range missing {
			// No IF NOT EXISTS: a column that appeared since the check
			// must fail the statement, not be adopted.
			adds[i] = "ADD COLUMN " + quote(c.name) + " " + c.ddl
		}
		stmts = append(stmts, "ALTER TABLE "+t+" "+strings.Join(adds, ", "))
		for _, c := range missing {
			stmts = append(stmts, fmt.Sprintf("COMMENT ON COLUMN %s.%s IS '%s'", t, quote(c.name), marker(c.role)))
		}
	}
	// An index the catalog already lists is not created again: CREATE
	// INDEX takes its SHARE lock on the table before it sees IF NOT
	// EXISTS, so every worker's start would wait for the table's open
	// write transactions (a stopped worker's, for as long as it is stopped)
	// and queue every other writer behind it meanwhile.
	if spec.ReadOnly {
		if !info.indexes[indexName(spec.name(), keysetIndex)] {
			stmts = append(stmts, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s)`,
				quote(indexName(spec.name(), keysetIndex)), t, quote(b.Bucket), k))
		}
	} else {
		if !info.indexes[indexName(spec.name(), workIndex)] {
			stmts = append(stmts, queueIndexDDL(spec, false))
		}
		if !info.indexes[indexName(spec.name(), pendingIndex)] {
			stmts = append(stmts, pendingIndexDDL(spec, false))
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	// One simple-protocol Exec: the statements run as one transaction.
	if _, err := db.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return fmt.Errorf("sources/postgres: migrating table %s: %w", spec.Table, err)
	}
	return nil
}

// queueIndexDDL is the statement creating spec's queue index, (status,
// bucket, key) WHERE status IN ('pending', 'claimed'): the claim mode's
// sweep of abandoned claims scans an item's bucket range of its claimed
// entries.
func queueIndexDDL(spec TableSpec, concurrently bool) string {
	b := spec.Bookkeeping
	st := quote(b.Status)
	return fmt.Sprintf(`CREATE INDEX %sIF NOT EXISTS %s ON %s (%s, %s, %s) WHERE %s IN ('pending', 'claimed')`,
		concurrent(concurrently), quote(indexName(spec.name(), workIndex)), spec.ident().Sanitize(), st, quote(b.Bucket), quote(spec.Key), st)
}

func concurrent(yes bool) string {
	if yes {
		return "CONCURRENTLY "
	}
	return ""
}

// pendingIndexDDL is the statement creating spec's pending index:
//
//	CREATE INDEX [CONCURRENTLY] IF NOT EXISTS <table>_shardflow_pending
//	  ON <table> (key, shardflow_bucket) WHERE shardflow_status = 'pending'
//
// The claim and transactional modes read an item's pending rows by it in
// key order (the bucket, a key column of the index, is tested on the index
// entries, never on the rows), so a batch's rows lie on a few consecutive
// heap pages instead of one page each (see TxJob.Fetch, ClaimJob.Fetch). concurrently gives the form
// that does not block writes, for an existing large table.
func pendingIndexDDL(spec TableSpec, concurrently bool) string {
	b := spec.Bookkeeping
	return fmt.Sprintf(`CREATE INDEX %sIF NOT EXISTS %s ON %s (%s, %s) WHERE %s = 'pending'`,
		concurrent(concurrently), quote(indexName(spec.name(), pendingIndex)), spec.ident().Sanitize(), quote(spec.Key), quote(b.Bucket), quote(b.Status))
}

// RenameLegacyColumns converts a table prepared by an earlier build of
// shardflow (before 0.1.0), whose bookkeeping columns were named bucket,
// status, claimed_by, claim_epoch, claimed_at, attempts and last_error, to
// this version's layout: it renames them to
// spec.Bookkeeping's names (default shardflow_bucket ...), marks them as
// Migrate's and renames the index, in one transaction that changes only
// the catalog (no table rewrite, every row keeps its state), then runs
// Migrate. Stop the workers of the earlier build first: they would not find
// their columns. It returns an error wrapping ErrConfig if the table was
// not prepared by an earlier build.
func RenameLegacyColumns(ctx context.Context, db Querier, spec TableSpec) error {
	spec = spec.withDefaults()
	if err := spec.validate(); err != nil {
		return err
	}
	info, err := readTable(ctx, db, spec)
	if err != nil {
		return err
	}
	oldIdx, newIdx := v1WorkIndex, workIndex
	if spec.ReadOnly {
		oldIdx, newIdx = v1KeysetIndex, keysetIndex
	}
	oldIdx, newIdx = indexName(spec.name(), oldIdx), indexName(spec.name(), newIdx)
	if !info.indexes[oldIdx] {
		return fmt.Errorf("%w: table %s has no index %s: it was not prepared by an earlier build of shardflow (before 0.1.0); run postgres.Migrate", ErrConfig, spec.Table, oldIdx)
	}
	t := spec.ident().Sanitize()
	var stmts []string
	for _, c := range spec.columns() {
		old := v1Names[c.role]
		if _, ok := info.cols[old]; !ok {
			return fmt.Errorf("%w: table %s has index %s but no column %q; finish the earlier build's migration or fix the table by hand",
				ErrConfig, spec.Table, oldIdx, old)
		}
		if old != c.name {
			if _, taken := info.cols[c.name]; taken {
				return fmt.Errorf("%w: cannot rename column %q of table %s to %q: that column exists; choose another TableSpec.Bookkeeping.%s",
					ErrColumnTaken, old, spec.Table, c.name, c.role)
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", t, quote(old), quote(c.name)))
		}
		stmts = append(stmts, fmt.Sprintf("COMMENT ON COLUMN %s.%s IS '%s'", t, quote(c.name), marker(c.role)))
	}
	stmts = append(stmts, fmt.Sprintf("ALTER INDEX %s RENAME TO %s", pgx.Identifier{info.schema, oldIdx}.Sanitize(), quote(newIdx)))
	if _, err := db.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return fmt.Errorf("sources/postgres: renaming the legacy columns of table %s: %w", spec.Table, err)
	}
	return Migrate(ctx, db, spec)
}

// MigrateFencing creates the shardflow_fence, shardflow_checkpoint and
// shardflow_dead_letter tables if they are missing. Migrate calls it; call
// it alone for a database that only holds sinks fenced by FenceTx.
func MigrateFencing(ctx context.Context, db Querier) error {
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
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				continue // created concurrently by another process (pg_type race)
			}
			return fmt.Errorf("sources/postgres: creating the fencing tables: %w", err)
		}
	}
	return nil
}

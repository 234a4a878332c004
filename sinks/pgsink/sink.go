// Package pgsink holds shardflow's Postgres sinks: COPY-speed appends and
// idempotent upserts, usable with a pool or inside a caller's transaction
// (the transaction of sources/postgres's transactional and checkpoint
// modes, so the sink's writes commit with the source's done mark).
package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrTarget: a Target field is invalid; the message names it.
var ErrTarget = errors.New("pgsink: invalid target")

// DB is what the sinks write through: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool all satisfy it. Begin on a pgx.Tx opens a savepoint.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Target names the table and columns a sink writes.
type Target struct {
	// Table is the table name, optionally schema-qualified ("sales.totals").
	// Required.
	Table string
	// Columns are the columns written, in the order of each source row.
	// Required.
	Columns []string
	// ConflictColumns (CopyUpsert only) are the columns of a unique index
	// or constraint of Table: the ON CONFLICT target. Required by CopyUpsert.
	ConflictColumns []string
	// UpdateColumns (CopyUpsert only) are set from the new row on conflict.
	// Empty: ON CONFLICT DO NOTHING (the first write wins).
	UpdateColumns []string
}

func (t Target) validate(upsert bool) error {
	if strings.TrimSpace(t.Table) == "" {
		return fmt.Errorf("%w: Target.Table is empty; name the table to write", ErrTarget)
	}
	if len(t.Columns) == 0 {
		return fmt.Errorf("%w: Target.Columns of %s is empty; list the columns each row holds", ErrTarget, t.Table)
	}
	if upsert && len(t.ConflictColumns) == 0 {
		return fmt.Errorf("%w: Target.ConflictColumns of %s is empty; CopyUpsert needs the columns of a unique index", ErrTarget, t.Table)
	}
	return nil
}

func (t Target) ident() pgx.Identifier { return pgx.Identifier(strings.Split(t.Table, ".")) }

// CopyAppend writes rows to t with COPY (pgx CopyFrom), the fastest path,
// and returns the number of rows written. With a pgx.Tx the rows commit or
// roll back with it. COPY has no ON CONFLICT: a unique violation fails the
// whole call; use CopyUpsert for idempotent writes. Blocks until the copy
// ends; ctx cancels it.
func CopyAppend(ctx context.Context, db DB, t Target, rows pgx.CopyFromSource) (int64, error) {
	if err := t.validate(false); err != nil {
		return 0, err
	}
	n, err := db.CopyFrom(ctx, t.ident(), t.Columns, rows)
	if err != nil {
		return n, fmt.Errorf("pgsink: COPY into %s %v: %w", t.Table, t.Columns, err)
	}
	return n, nil
}

var stageSeq atomic.Uint64

// CopyUpsert writes rows to t idempotently: COPY into a temporary staging
// table shaped like t's columns, then INSERT INTO t SELECT ... ON CONFLICT
// (ConflictColumns) DO UPDATE SET UpdateColumns (or DO NOTHING), then drop
// the staging table, all in one transaction (a savepoint when db is a
// pgx.Tx, so it commits with the caller's transaction). It returns the
// rows inserted or updated. Rows of one call must not repeat a conflict key
// (Postgres refuses to update a row twice in one statement).
func CopyUpsert(ctx context.Context, db DB, t Target, rows pgx.CopyFromSource) (int64, error) {
	if err := t.validate(true); err != nil {
		return 0, err
	}
	stage := fmt.Sprintf("shardflow_stage_%d", stageSeq.Add(1))
	table := t.ident().Sanitize()
	cols := quoteAll(t.Columns)
	action := "DO NOTHING"
	if len(t.UpdateColumns) > 0 {
		sets := make([]string, len(t.UpdateColumns))
		for i, c := range t.UpdateColumns {
			q := pgx.Identifier{c}.Sanitize()
			sets[i] = q + " = EXCLUDED." + q
		}
		action = "DO UPDATE SET " + strings.Join(sets, ", ")
	}
	var affected int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE %s ON COMMIT DROP AS SELECT %s FROM %s WITH NO DATA`, stage, cols, table)); err != nil {
			return fmt.Errorf("creating the staging table: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{stage}, t.Columns, rows); err != nil {
			return fmt.Errorf("COPY into the staging table: %w", err)
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT (%s) %s`,
			table, cols, cols, stage, quoteAll(t.ConflictColumns), action))
		if err != nil {
			return fmt.Errorf("INSERT ... ON CONFLICT (%s): %w", strings.Join(t.ConflictColumns, ", "), err)
		}
		affected = tag.RowsAffected()
		_, err = tx.Exec(ctx, "DROP TABLE "+stage)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgsink: upserting into %s: %w", t.Table, err)
	}
	return affected, nil
}

func quoteAll(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

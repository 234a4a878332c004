package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedRow is a row of a work table marked 'failed': its processing
// failed MaxAttempts times (or its claim was abandoned that often).
type FailedRow struct {
	// Key is the row's key.
	Key int64 `json:"id"`
	// Attempts is how many times it was processed.
	Attempts int `json:"attempts"`
	// LastError is the text of its last error.
	LastError string `json:"lastError"`
	// FailedAt is when it was marked failed (nil for rows failed by the
	// first release, which did not record it).
	FailedAt *time.Time `json:"failedAt,omitempty"`
}

// FailedFilter selects failed rows. The zero value selects them all.
type FailedFilter struct {
	// Keys, when not empty, selects only these keys.
	Keys []int64
	// ErrorContains, when not empty, selects only rows whose last error
	// contains it (case-insensitive).
	ErrorContains string
}

func (f FailedFilter) where(spec TableSpec, args *[]any) string {
	b := spec.Bookkeeping
	conds := []string{quote(b.Status) + " = 'failed'"}
	if len(f.Keys) > 0 {
		*args = append(*args, f.Keys)
		conds = append(conds, fmt.Sprintf("%s = ANY($%d::bigint[])", quote(spec.Key), len(*args)))
	}
	if f.ErrorContains != "" {
		*args = append(*args, f.ErrorContains)
		conds = append(conds, fmt.Sprintf("strpos(lower(%s), lower($%d)) > 0", quote(b.LastError), len(*args)))
	}
	return strings.Join(conds, " AND ")
}

// ListFailed returns up to limit (<= 0: all) failed rows of spec's work
// table selected by f, in key order. It only reads.
func ListFailed(ctx context.Context, db Querier, spec TableSpec, f FailedFilter, limit int) ([]FailedRow, error) {
	spec, err := checkWorkTable(ctx, db, spec)
	if err != nil {
		return nil, err
	}
	b := spec.Bookkeeping
	var args []any
	sql := fmt.Sprintf(`SELECT %s, %s, coalesce(%s, ''), %s FROM %s WHERE %s ORDER BY %s`,
		quote(spec.Key), quote(b.Attempts), quote(b.LastError), quote(b.ClaimedAt), spec.ident().Sanitize(),
		f.where(spec, &args), quote(spec.Key))
	if limit > 0 {
		sql += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: listing the failed rows of table %s: %w", spec.Table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedRow, error) {
		var fr FailedRow
		var attempts int32
		err := r.Scan(&fr.Key, &attempts, &fr.LastError, &fr.FailedAt)
		fr.Attempts = int(attempts)
		return fr, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: listing the failed rows of table %s: %w", spec.Table, err)
	}
	return out, nil
}

// Requeue puts the failed rows of spec's work table selected by f back to
// 'pending' with no attempt counted (their last error is kept until they
// succeed), so the next fetch of their shard item processes them again. It
// returns how many rows it requeued. It is safe while workers run: it is
// one statement that changes only rows in status 'failed', which no
// worker writes (claims take pending rows, marks are guarded by the
// claim).
func Requeue(ctx context.Context, db Querier, spec TableSpec, f FailedFilter) (int64, error) {
	spec, err := checkWorkTable(ctx, db, spec)
	if err != nil {
		return 0, err
	}
	b := spec.Bookkeeping
	var args []any
	where := f.where(spec, &args)
	tag, err := db.Exec(ctx, fmt.Sprintf(`UPDATE %s SET %s = 'pending', %s = 0, %s = NULL, %s = NULL, %s = NULL WHERE %s`,
		spec.ident().Sanitize(), quote(b.Status), quote(b.Attempts), quote(b.ClaimedBy), quote(b.ClaimEpoch), quote(b.ClaimedAt), where), args...)
	if err != nil {
		return 0, fmt.Errorf("sources/postgres: requeueing the failed rows of table %s: %w", spec.Table, err)
	}
	return tag.RowsAffected(), nil
}

// checkWorkTable fills in spec's defaults and checks that its table is a
// work table whose bookkeeping columns Migrate created: the failed-rows
// functions write no column that is not shardflow's.
func checkWorkTable(ctx context.Context, db Querier, spec TableSpec) (TableSpec, error) {
	spec = spec.withDefaults()
	if err := spec.validate(); err != nil {
		return spec, err
	}
	if spec.ReadOnly {
		return spec, fmt.Errorf("%w: table %s is ReadOnly (checkpoint mode): its failed rows are in shardflow_dead_letter, not marked in the table", ErrConfig, spec.Table)
	}
	info, err := readTable(ctx, db, spec)
	if err != nil {
		return spec, err
	}
	missing, err := info.checkBookkeeping(spec)
	if err != nil {
		return spec, err
	}
	if len(missing) > 0 {
		return spec, fmt.Errorf("%w: bookkeeping column %q of table %s; is it a shardflow work table (check the table name and its TableSpec.Bookkeeping names)?",
			ErrMissingColumn, missing[0].name, spec.Table)
	}
	return spec, nil
}

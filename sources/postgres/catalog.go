package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// markerPrefix starts the comment Migrate puts on every column it
// creates: "shardflow:<role> ...". A column without it is the user's.
const markerPrefix = "shardflow:"

func marker(role string) string {
	return markerPrefix + role + " (bookkeeping column created by sources/postgres.Migrate; written by shardflow only)"
}

func isMarked(comment, role string) bool {
	m := markerPrefix + role
	return comment == m || strings.HasPrefix(comment, m+" ")
}

// Index names. An earlier build's names identify its tables (see
// RenameLegacyColumns).
const (
	workIndex     = "shardflow_queue"
	pendingIndex  = "shardflow_pending"
	keysetIndex   = "shardflow_scan"
	v1WorkIndex   = "shardflow_work"
	v1KeysetIndex = "shardflow_keyset"
)

// v1Names are an earlier build's bookkeeping columns, by role.
var v1Names = map[string]string{
	"Bucket": "bucket", "Status": "status", "ClaimedBy": "claimed_by", "ClaimEpoch": "claim_epoch",
	"ClaimedAt": "claimed_at", "Attempts": "attempts", "LastError": "last_error",
}

type column struct {
	typ     string // format_type
	typOID  uint32
	comment string
	notNull bool // NOT NULL
}

// tableInfo is what the catalog says about a table.
type tableInfo struct {
	oid     uint32
	schema  string
	order   []string
	cols    map[string]column
	indexes map[string]bool
}

// readTable reads spec's table from the catalog; ErrMissingTable if absent.
func readTable(ctx context.Context, db Querier, spec TableSpec) (*tableInfo, error) {
	info := &tableInfo{cols: map[string]column{}, indexes: map[string]bool{}}
	var oid *uint32
	if err := db.QueryRow(ctx, `SELECT to_regclass($1)::oid`, spec.ident().Sanitize()).Scan(&oid); err != nil {
		return nil, fmt.Errorf("sources/postgres: looking up table %s: %w", spec.Table, err)
	}
	if oid == nil {
		return nil, fmt.Errorf("%w: %s (create it, or fix TableSpec.Table; schema-qualify a table outside the search_path)", ErrMissingTable, spec.Table)
	}
	info.oid = *oid
	if err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`,
		info.oid).Scan(&info.schema); err != nil {
		return nil, fmt.Errorf("sources/postgres: reading the schema of table %s: %w", spec.Table, err)
	}
	rows, err := db.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8,
  coalesce(col_description(a.attrelid, a.attnum), ''), a.attnotnull
FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, info.oid)
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: reading the columns of table %s: %w", spec.Table, err)
	}
	for rows.Next() {
		var name string
		var c column
		var typOID int64
		if err := rows.Scan(&name, &c.typ, &typOID, &c.comment, &c.notNull); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sources/postgres: reading the columns of table %s: %w", spec.Table, err)
		}
		c.typOID = uint32(typOID)
		info.order = append(info.order, name)
		info.cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sources/postgres: reading the columns of table %s: %w", spec.Table, err)
	}
	idx, err := db.Query(ctx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1`, info.oid)
	if err == nil {
		var names []string
		names, err = pgx.CollectRows(idx, pgx.RowTo[string])
		for _, n := range names {
			info.indexes[n] = true
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: reading the indexes of table %s: %w", spec.Table, err)
	}
	return info, nil
}

// checkBookkeeping refuses a first-release table and any column of a
// bookkeeping name that Migrate did not create; it returns the
// bookkeeping columns still missing.
func (info *tableInfo) checkBookkeeping(spec TableSpec) ([]bookColumn, error) {
	v1 := indexName(spec.name(), v1WorkIndex)
	if spec.ReadOnly {
		v1 = indexName(spec.name(), v1KeysetIndex)
	}
	if info.indexes[v1] {
		return nil, fmt.Errorf("%w: table %s was prepared by an earlier build of shardflow (before 0.1.0) (index %s on its columns %s, ...); "+
			"stop its workers and run once `shardflow failed upgrade-v1 --table %s` or postgres.RenameLegacyColumns(ctx, pool, spec): "+
			"it renames them to the shardflow_ names without rewriting the table", ErrLegacyColumns, spec.Table, v1, v1Names["Status"], spec.Table)
	}
	var missing []bookColumn
	for _, c := range spec.columns() {
		col, ok := info.cols[c.name]
		if !ok {
			missing = append(missing, c)
			continue
		}
		if !isMarked(col.comment, c.role) {
			return nil, fmt.Errorf("%w: column %q of table %s (%s) exists but was not created by postgres.Migrate, so shardflow will not write it; "+
				"give the bookkeeping column another name with TableSpec.Bookkeeping.%s, or, if the column really is shardflow's %s column "+
				"(created by hand), mark it: COMMENT ON COLUMN %s.%s IS '%s%s'",
				ErrColumnTaken, c.name, spec.Table, col.typ, c.role, c.role, spec.ident().Sanitize(), quote(c.name), markerPrefix, c.role)
		}
	}
	return missing, nil
}

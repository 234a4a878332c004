package pghistory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardflow/shardflow/history"
)

// ErrNoTable: the history table does not exist in the database queried.
var ErrNoTable = errors.New("pghistory: no history table in this database; record history first (a Node with NodeConfig.History from pghistory, or examples/pgbatch), or name the table")

// where builds the WHERE clause of f (Since only when withSince), with its
// arguments numbered from 1.
func where(f history.Filter, withSince bool) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if f.Job != "" {
		add("job = $%d", f.Job)
	}
	if f.Item != nil {
		add("item = $%d", int32(*f.Item))
	}
	if f.Server != "" {
		add("server = $%d", f.Server)
	}
	if f.WorkflowRun != "" {
		add("workflow_run = $%d", f.WorkflowRun)
	}
	if withSince && !f.Since.IsZero() {
		add("end_at >= $%d", f.Since)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// Runs implements history.Reader: the records f selects, newest first.
func (s *Store) Runs(ctx context.Context, f history.Filter) ([]history.Record, error) {
	w, args := where(f, true)
	q := fmt.Sprintf(`SELECT %s FROM %s%s ORDER BY begin_at DESC, job, item, server`, strings.Join(columns, ", "), s.name, w)
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return s.query(ctx, q, args...)
}

// OwnersAt implements history.Reader: per item, the run that had begun
// latest at or before at (f.Server filters the owners, not the runs).
func (s *Store) OwnersAt(ctx context.Context, f history.Filter, at time.Time) ([]history.Record, error) {
	server := f.Server
	f.Server = ""
	w, args := where(f, false)
	args = append(args, at)
	atCond := fmt.Sprintf("begin_at <= $%d", len(args))
	if w == "" {
		w = " WHERE " + atCond
	} else {
		w += " AND " + atCond
	}
	cols := strings.Join(columns, ", ")
	q := fmt.Sprintf(`SELECT %[1]s FROM (SELECT DISTINCT ON (job, item) %[1]s FROM %[2]s%[3]s ORDER BY job, item, begin_at DESC) o`, cols, s.name, w)
	if server != "" {
		args = append(args, server)
		q += fmt.Sprintf(" WHERE server = $%d", len(args))
	}
	q += " ORDER BY job, item"
	return s.query(ctx, q, args...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]history.Record, error) {
	rows, err := s.cfg.Pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.queryErr(err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Record, error) {
		var r history.Record
		var item int32
		var src string
		err := row.Scan(&r.Job, &r.Server, &item, &r.Epoch, &src, &r.Begin, &r.End, &r.Success, &r.Failure, &r.Error, &r.WorkflowRun)
		r.Item, r.Source = int(item), history.Source(src)
		r.Begin, r.End = r.Begin.UTC(), r.End.UTC()
		return r, err
	})
	if err != nil {
		return nil, s.queryErr(err)
	}
	return recs, nil
}

func (s *Store) queryErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w (table %s)", ErrNoTable, s.name)
	}
	return fmt.Errorf("pghistory: query %s: %w", s.name, err)
}

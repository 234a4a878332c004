package pghistory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/history"
)

// DefaultTable is the history table's default name.
const DefaultTable = "shardflow_history"

// Config configures a Store. Zero fields take the stated defaults.
type Config struct {
	// Pool is the history database. Required. A database of its own, or the
	// job's: writes are small batches, off the runs' path.
	Pool *pgxpool.Pool
	// Table is the table's name, optionally schema-qualified ("ops.history").
	// Default "shardflow_history".
	Table string
	// Retention is how long rows are kept (by their end time); older rows
	// are deleted by the writes. Default 30 days; negative keeps rows forever.
	Retention time.Duration
	// PruneInterval is the least time between two retention deletes.
	// Default 10 min.
	PruneInterval time.Duration
	// Logger receives failed retention deletes. Default slog.Default().
	Logger *slog.Logger
}

// ErrNoPool is returned by New without a Pool.
var ErrNoPool = errors.New("pghistory: Config.Pool is nil; pass a pgxpool.Pool of the history database")

// Store writes history records to a Postgres table and reads them back. It
// is a history.Writer (for a history.Buffer) and a history.Reader. Safe for
// concurrent use.
type Store struct {
	cfg   Config
	table pgx.Identifier
	name  string // the table's sanitized name, for SQL

	pruneMu   sync.Mutex
	lastPrune time.Time
}

// New returns a Store for cfg. It does not touch the database; call Migrate
// once to create the table.
func New(cfg Config) (*Store, error) {
	if cfg.Pool == nil {
		return nil, ErrNoPool
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.Retention == 0 {
		cfg.Retention = 30 * 24 * time.Hour
	}
	if cfg.PruneInterval <= 0 {
		cfg.PruneInterval = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	parts := strings.Split(cfg.Table, ".")
	if len(parts) > 2 || slicesHasEmpty(parts) {
		return nil, fmt.Errorf("pghistory: Config.Table %q: want TABLE or SCHEMA.TABLE", cfg.Table)
	}
	id := pgx.Identifier(parts)
	return &Store{cfg: cfg, table: id, name: id.Sanitize()}, nil
}

func slicesHasEmpty(ss []string) bool {
	for _, s := range ss {
		if s == "" {
			return true
		}
	}
	return false
}

// columns in COPY and SELECT order.
var columns = []string{"job", "server", "item", "epoch", "source", "begin_at", "end_at", "success", "failure", "error", "workflow_run"}

// Migrate creates the table and its indexes if missing. Idempotent; safe to
// run from every process at start, also at the same instant (the DDL is
// serialized by an advisory lock).
func (s *Store) Migrate(ctx context.Context) error {
	base := s.table[len(s.table)-1]
	idx := func(suffix string) string { return pgx.Identifier{base + "_" + suffix}.Sanitize() }
	ddl := fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %[1]s (
  job      text        NOT NULL,
  server   text        NOT NULL,
  item     integer     NOT NULL,
  epoch    bigint      NOT NULL,
  source   text        NOT NULL CHECK (source IN ('normal', 'misfire', 'failover', 'manual')),
  begin_at timestamptz NOT NULL,
  end_at   timestamptz NOT NULL,
  success  bigint      NOT NULL,
  failure  bigint      NOT NULL,
  error    text        NOT NULL DEFAULT '',
  workflow_run text    NOT NULL DEFAULT ''
);
-- tables created before workflows
ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS workflow_run text NOT NULL DEFAULT '';
-- a workflow run's item runs (shardflow history --workflow-run)
CREATE INDEX IF NOT EXISTS %[6]s ON %[1]s (workflow_run) WHERE workflow_run <> '';
-- a job's or an item's runs newest first, and "who owned item N at T"
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (job, item, begin_at DESC);
-- every run newest first, and a server's
CREATE INDEX IF NOT EXISTS %[3]s ON %[1]s (begin_at DESC);
CREATE INDEX IF NOT EXISTS %[4]s ON %[1]s (server, begin_at DESC);
-- --since and the retention delete
CREATE INDEX IF NOT EXISTS %[5]s ON %[1]s (end_at);`,
		s.name, idx("job_item_begin_idx"), idx("begin_idx"), idx("server_begin_idx"), idx("end_idx"), idx("workflow_run_idx"))
	// Every worker calls Migrate at start: concurrent CREATE ... IF NOT EXISTS
	// of one table can still fail on pg_type's unique index, so the DDL runs
	// under a transaction-scoped advisory lock keyed by the table's name.
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('shardflow.pghistory.migrate:' || $1))`, s.name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, ddl)
		return err
	})
	if err != nil {
		return fmt.Errorf("pghistory: migrate %s: %w", s.name, err)
	}
	return nil
}

// Write stores recs with one COPY, then deletes rows past the retention if
// PruneInterval has passed since the last delete (a failed delete is logged,
// not returned: the records are stored). It implements history.Writer.
func (s *Store) Write(ctx context.Context, recs []history.Record) error {
	recs = s.valid(recs)
	if len(recs) == 0 {
		return nil
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= len(recs) {
			return nil, nil
		}
		r := recs[i]
		i++
		return []any{r.Job, r.Server, int32(r.Item), r.Epoch, string(r.Source), r.Begin, r.End, r.Success, r.Failure, r.Error, r.WorkflowRun}, nil
	})
	if _, err := s.cfg.Pool.CopyFrom(ctx, s.table, columns, src); err != nil {
		return fmt.Errorf("pghistory: COPY %d records into %s: %w", len(recs), s.name, err)
	}
	if s.cfg.Retention > 0 && s.pruneDue() {
		if n, err := s.Prune(ctx, time.Now().Add(-s.cfg.Retention)); err != nil {
			s.cfg.Logger.Warn("pghistory: deleting rows past the retention failed; retried later", "table", s.name, "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("pghistory: deleted rows past the retention", "table", s.name, "rows", n, "retention", s.cfg.Retention)
		}
	}
	return nil
}

// valid drops (and logs) records the table's CHECK would refuse: one bad
// record must not make its whole batch fail again at every retry.
func (s *Store) valid(recs []history.Record) []history.Record {
	for i, r := range recs {
		if r.Source.Valid() {
			continue
		}
		out := append([]history.Record(nil), recs[:i]...)
		for _, r := range recs[i:] {
			if r.Source.Valid() {
				out = append(out, r)
			} else {
				s.cfg.Logger.Warn("pghistory: record dropped", "err", history.ErrBadSource, "source", r.Source, "job", r.Job, "item", r.Item)
			}
		}
		return out
	}
	return recs
}

func (s *Store) pruneDue() bool {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	now := time.Now()
	if !s.lastPrune.IsZero() && now.Sub(s.lastPrune) < s.cfg.PruneInterval {
		return false
	}
	s.lastPrune = now
	return true
}

// pruneBatch bounds one DELETE, so a large backlog never holds one long
// transaction.
const pruneBatch = 10000

// Prune deletes the rows that ended before before, in batches, and returns
// how many it deleted.
func (s *Store) Prune(ctx context.Context, before time.Time) (int64, error) {
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE end_at < $1 LIMIT %[2]d)`, s.name, pruneBatch)
	var total int64
	for {
		tag, err := s.cfg.Pool.Exec(ctx, q, before)
		if err != nil {
			return total, fmt.Errorf("pghistory: prune %s: %w", s.name, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

var (
	_ history.Writer = (*Store)(nil)
	_ history.Reader = (*Store)(nil)
)

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sinks/pgsink"
	"github.com/shardflow/shardflow/sources/postgres"
)

// The source table is an ordinary business table, with its own status
// column: Migrate adds the shardflow_ bookkeeping columns beside it (before
// seeding, so the table is never rewritten), and the job never writes
// status. The result table has NO unique constraint on source_id, so a
// duplicate effect would show in verify.
const ddl = `
CREATE TABLE IF NOT EXISTS pgbatch_source (
  id          bigint      PRIMARY KEY,
  payload     text        NOT NULL,
  status      text        NOT NULL DEFAULT 'open'
);
CREATE TABLE IF NOT EXISTS pgbatch_result (
  source_id   bigint      NOT NULL,
  payload_len integer     NOT NULL,
  worker      text        NOT NULL,
  epoch       bigint      NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);`

// Source is a row of pgbatch_source as the job sees it.
type Source struct {
	ID      int64  `db:"id"`
	Payload string `db:"payload"`
}

var sourceSpec = postgres.TableSpec{Table: "pgbatch_source", Key: "id", Columns: []string{"id", "payload"}}

var resultTarget = pgsink.Target{Table: "pgbatch_result", Columns: []string{"source_id", "payload_len", "worker", "epoch"}}

// setup creates the tables, then Migrate adds the bookkeeping columns, the
// work index and the fencing tables.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("creating the pgbatch tables: %w", err)
	}
	return postgres.Migrate(ctx, pool, sourceSpec)
}

// process is the job's effect: one pgbatch_result row per source row,
// written with the transaction that marks the rows done. delay > 0 holds
// each batch's transaction open that long first (slow work: a stop's grace
// period then cuts batches in flight, whose transactions roll back).
func process(worker string, delay time.Duration) postgres.TxProcessFunc[Source] {
	return func(ctx context.Context, tx pgx.Tx, shard dataflow.Shard, items []Source) error {
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rows := make([][]any, len(items))
		for i, s := range items {
			rows[i] = []any{s.ID, len(s.Payload), worker, shard.Epoch}
		}
		_, err := pgsink.CopyAppend(ctx, tx, resultTarget, pgx.CopyFromRows(rows))
		return err
	}
}

// Report is what verify prints; see README.md for the definitions.
type Report struct {
	Rows             int64 `json:"rows"`
	Done             int64 `json:"done"`
	Pending          int64 `json:"pending"`
	Failed           int64 `json:"failed"`
	Lost             int64 `json:"lost"`
	DuplicateEffects int64 `json:"duplicate_effects"`
	OrphanEffects    int64 `json:"orphan_effects"`
	// BusinessWrites counts source rows whose own status column is no
	// longer the 'open' every row is seeded with: the job must never write it.
	BusinessWrites int64 `json:"business_writes"`
}

const verifySQL = `
WITH r AS (SELECT source_id, count(*) AS n FROM pgbatch_result GROUP BY source_id)
SELECT
  (SELECT count(*) FROM pgbatch_source),
  (SELECT count(*) FROM pgbatch_source WHERE shardflow_status = 'done'),
  (SELECT count(*) FROM pgbatch_source WHERE shardflow_status IN ('pending', 'claimed')),
  (SELECT count(*) FROM pgbatch_source WHERE shardflow_status = 'failed'),
  (SELECT count(*) FROM pgbatch_source s LEFT JOIN r ON r.source_id = s.id
     WHERE (s.shardflow_status = 'done' AND r.source_id IS NULL)
        OR (s.shardflow_status NOT IN ('done', 'pending', 'claimed', 'failed'))),
  (SELECT coalesce(sum(n - 1), 0) FROM r WHERE n > 1),
  (SELECT count(*) FROM r LEFT JOIN pgbatch_source s ON s.id = r.source_id
     WHERE s.id IS NULL OR s.shardflow_status <> 'done'),
  (SELECT count(*) FROM pgbatch_source WHERE status <> 'open')`

func verify(ctx context.Context, pool *pgxpool.Pool) (Report, error) {
	var r Report
	err := pool.QueryRow(ctx, verifySQL).Scan(&r.Rows, &r.Done, &r.Pending, &r.Failed, &r.Lost, &r.DuplicateEffects, &r.OrphanEffects, &r.BusinessWrites)
	if err != nil {
		return r, fmt.Errorf("verify: %w", err)
	}
	return r, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// seed appends n rows after the highest id with COPY.
func seed(ctx context.Context, pool *pgxpool.Pool, n int64) (int64, error) {
	if err := setup(ctx, pool); err != nil {
		return 0, err
	}
	var start int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM pgbatch_source`).Scan(&start); err != nil {
		return 0, fmt.Errorf("seed: reading the highest id: %w", err)
	}
	var i int64
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		id := start + i
		return []any{id, fmt.Sprintf("payload-%d", id)}, nil
	})
	written, err := pool.CopyFrom(ctx, pgx.Identifier{"pgbatch_source"}, []string{"id", "payload"}, src)
	if err != nil {
		return written, fmt.Errorf("seed: COPY into pgbatch_source: %w", err)
	}
	return written, nil
}

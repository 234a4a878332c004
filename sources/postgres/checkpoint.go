package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/dataflow"
)

// CheckpointJob is the checkpoint mode for read-only tables: a
// dataflow.BatchJob[Row[T]] reading each item's buckets by keyset on
// (bucket, key), each bucket from its row in shardflow_checkpoint (the last
// key done), and advancing those rows in the same transaction as the
// TxProcessFunc's writes, fenced with FenceTx. Effects written with the
// transaction happen once per row. Rows appended later with a key above
// their bucket's checkpoint are read by a later fetch; a row inserted
// below it is never read (the table is meant to be append-only by key).
//
// The checkpoint is a position, so one fetched batch commits in key order
// as one transaction: the first ProcessBatch call of a fetch processes the
// whole batch and the Node's other slices of it wait for that outcome.
// Parallelism comes from shard items. A row whose processing fails counts
// an attempt in its bucket's checkpoint row; after MaxAttempts it is
// written to shardflow_dead_letter and skipped. A row that cannot be read
// into T (Row.Err) is written to shardflow_dead_letter at once, in the
// transaction that moves the checkpoint past it, and counts as a failure. Checkpoints are per bucket,
// so a new ShardingTotalCount keeps every position. Safe for concurrent use.
type CheckpointJob[T any] struct {
	src     *Source[T]
	process TxProcessFunc[T]

	mu      sync.Mutex
	batches map[int]*cpBatch[T] // by shard item: the last fetched batch
}

// cpBatch is one fetched batch, committed once by the first slice to come.
type cpBatch[T any] struct {
	rows      []Row[T]
	keys      map[int64]bool
	once      sync.Once
	committed map[int64]bool
	err       error
}

func newBatch[T any](rows []Row[T]) *cpBatch[T] {
	b := &cpBatch[T]{rows: rows, keys: make(map[int64]bool, len(rows))}
	for _, r := range rows {
		b.keys[r.Key] = true
	}
	return b
}

func (b *cpBatch[T]) contains(items []Row[T]) bool {
	for _, it := range items {
		if !b.keys[it.Key] {
			return false
		}
	}
	return true
}

// Checkpoint returns the checkpoint-mode job. The table must be ReadOnly
// in TableSpec (bucket column and (bucket, key) index, see Migrate).
func (s *Source[T]) Checkpoint(process TxProcessFunc[T]) *CheckpointJob[T] {
	return &CheckpointJob[T]{src: s, process: process, batches: map[int]*cpBatch[T]{}}
}

var _ dataflow.BatchJob[Row[int]] = (*CheckpointJob[int])(nil)

// Fetch reads up to shard.FetchCount rows of the item's buckets, in
// (bucket, key) order, each bucket after its checkpoint (from its first
// key when it has none). A statement error (see Classify) opens a backoff
// step, reported once, and the read runs again after it, until it succeeds
// or ctx ends.
func (j *CheckpointJob[T]) Fetch(ctx context.Context, shard dataflow.Shard) ([]Row[T], error) {
	s := j.src
	lo, hi, ok := BucketRange(shard.Item, shard.Total)
	if !ok || shard.FetchCount <= 0 {
		return nil, nil
	}
	var out []Row[T]
	err := s.untilOK(ctx, shard, "fetch", func(ctx context.Context) error {
		rows, err := s.cfg.Pool.Query(ctx, s.sql.keyset, lo, hi, shard.JobName, shard.FetchCount)
		if err != nil {
			return err
		}
		out, err = s.collect(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: reading table %s after the checkpoint of job %s item %d: %w", s.spec.Table, shard.JobName, shard.Item, err)
	}
	j.mu.Lock()
	if len(out) == 0 {
		delete(j.batches, shard.Item)
	} else {
		j.batches[shard.Item] = newBatch(out)
	}
	j.mu.Unlock()
	return out, nil
}

// ProcessBatch commits the item's last fetched batch once (whichever slice
// of it arrives first does the work; the others wait for it) and returns
// how many of items were committed. Rows up to the first failing one are
// committed with the checkpoint; the failing row counts an attempt (or is
// dead-lettered after MaxAttempts and skipped); the rows after it are left
// for the next fetch.
func (j *CheckpointJob[T]) ProcessBatch(ctx context.Context, shard dataflow.Shard, items []Row[T]) (int, error) {
	if len(items) == 0 {
		return 0, nil
	}
	j.mu.Lock()
	b := j.batches[shard.Item]
	j.mu.Unlock()
	if b == nil || !b.contains(items) {
		// Not from the last Fetch of this item (a custom host): commit as its own batch.
		b = newBatch(items)
	}
	b.once.Do(func() { b.committed, b.err = j.run(ctx, shard, b.rows) })
	n := 0
	for _, it := range items {
		if b.committed[it.Key] {
			n++
		}
	}
	if n == 0 && b.err != nil {
		return 0, b.err
	}
	return n, nil
}

// run commits rows in key order: all at once, or, when the function
// fails with a row error, one per transaction up to the failing row. A
// statement error commits nothing more and backs the item off.
func (j *CheckpointJob[T]) run(ctx context.Context, shard dataflow.Shard, rows []Row[T]) (map[int64]bool, error) {
	s := j.src
	committed := make(map[int64]bool, len(rows))
	err := j.commit(ctx, shard, rows)
	if err == nil {
		for _, r := range rows {
			committed[r.Key] = r.readErr == nil
		}
		s.statementOK(ctx, shard)
		return committed, nil
	}
	if s.backedOff(ctx, shard, err) {
		return committed, nil
	}
	var ue *userError
	if !errors.As(err, &ue) {
		return committed, err
	}
	for i, r := range rows {
		if len(rows) > 1 {
			err = j.commit(ctx, shard, rows[i:i+1])
		}
		if err == nil {
			committed[r.Key] = r.readErr == nil
			continue
		}
		if s.backedOff(ctx, shard, err) {
			return committed, nil
		}
		if !errors.As(err, &ue) {
			return committed, err
		}
		skipped, ferr := j.recordFailure(ctx, shard, r.Key, ue.err)
		if s.backedOff(ctx, shard, ferr) {
			return committed, nil
		}
		if ferr != nil {
			return committed, ferr
		}
		s.cfg.Logger.Warn("sources/postgres: row processing failed", "table", s.spec.Table,
			"job", shard.JobName, "item", shard.Item, "key", r.Key, "dead_lettered", skipped, "err", ue.err)
		if !skipped {
			// The checkpoint stays before this row: the next fetch retries it.
			return committed, nil
		}
	}
	return committed, nil
}

// commit runs the user's function on rows and advances the checkpoint to
// the last of them, fenced, in one transaction.
func (j *CheckpointJob[T]) commit(ctx context.Context, shard dataflow.Shard, rows []Row[T]) error {
	s := j.src
	tx, err := s.cfg.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sources/postgres: beginning a transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	good, bad, errs := splitUnread(rows)
	if len(good) > 0 {
		if err := j.process(ctx, tx, shard, values(good)); err != nil {
			err = shard.HandleError(ctx, err)
			if Classify(err) == ClassStatement || ctx.Err() != nil {
				return fmt.Errorf("sources/postgres: processing rows of table %s: %w", s.spec.Table, err)
			}
			return &userError{err: err}
		}
	}
	if len(bad) > 0 {
		// Rows that cannot be read are dead-lettered at once, and the
		// checkpoint moves past them with the rest.
		if _, err := tx.Exec(ctx, deadLetterSQL, shard.JobName, bad, errs); err != nil {
			return fmt.Errorf("sources/postgres: dead-lettering %d unreadable rows of table %s (job %s item %d): %w", len(bad), s.spec.Table, shard.JobName, shard.Item, err)
		}
		for _, r := range rows {
			if r.readErr != nil {
				s.logSetAside(shard, r.readErr)
			}
		}
	}
	buckets, lasts := positions(rows)
	if _, err := tx.Exec(ctx, s.sql.checkpoint, shard.JobName, buckets, lasts, shard.Epoch); err != nil {
		return fmt.Errorf("sources/postgres: writing the checkpoint of job %s item %d: %w", shard.JobName, shard.Item, err)
	}
	if err := s.fence(ctx, tx, shard); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sources/postgres: committing the checkpoint of job %s item %d: %w", shard.JobName, shard.Item, err)
	}
	return nil
}

// recordFailure counts a failed attempt of the row after the checkpoint;
// at MaxAttempts it dead-letters the row and moves the checkpoint past it
// (skipped is then true). One fenced transaction.
func (j *CheckpointJob[T]) recordFailure(ctx context.Context, shard dataflow.Shard, key int64, perr error) (skipped bool, err error) {
	s := j.src
	err = pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var attempts int
		err := tx.QueryRow(ctx, `INSERT INTO shardflow_checkpoint AS c (job, bucket, key, epoch, attempts, last_error)
VALUES ($1, $2, $3, $4, 1, $5)
ON CONFLICT (job, bucket) DO UPDATE SET attempts = c.attempts + 1, epoch = EXCLUDED.epoch, last_error = EXCLUDED.last_error
RETURNING c.attempts`, shard.JobName, int16(bucketOf(key)), int64(math.MinInt64), shard.Epoch, perr.Error()).Scan(&attempts)
		if err != nil {
			return err
		}
		if attempts >= s.cfg.MaxAttempts {
			if _, err := tx.Exec(ctx, `INSERT INTO shardflow_dead_letter (job, key, error) VALUES ($1, $2, $3)
ON CONFLICT (job, key) DO UPDATE SET error = EXCLUDED.error, failed_at = now()`, shard.JobName, key, perr.Error()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.sql.checkpoint, shard.JobName, []int16{int16(bucketOf(key))}, []int64{key}, shard.Epoch); err != nil {
				return err
			}
			skipped = true
		}
		return s.fence(ctx, tx, shard)
	})
	if err != nil {
		return false, fmt.Errorf("sources/postgres: recording the failure of row %d (job %s item %d; %v): %w", key, shard.JobName, shard.Item, perr, err)
	}
	return skipped, nil
}

// deadLetterSQL writes rows to shardflow_dead_letter: $1 job, $2 keys, $3 errors.
const deadLetterSQL = `INSERT INTO shardflow_dead_letter (job, key, error)
SELECT $1, u.k, u.e FROM unnest($2::bigint[], $3::text[]) AS u(k, e)
ON CONFLICT (job, key) DO UPDATE SET error = EXCLUDED.error, failed_at = now()`

// splitUnread splits rows into those read whole and the keys and errors
// of those that could not be read (Row.Err).
func splitUnread[T any](rows []Row[T]) (good []Row[T], bad []int64, errs []string) {
	for _, r := range rows {
		if r.readErr == nil {
			good = append(good, r)
			continue
		}
		bad = append(bad, r.Key)
		errs = append(errs, r.readErr.Error())
	}
	return good, bad, errs
}

// positions returns, for each bucket of rows (sorted by bucket, key), the
// last key: the bucket checkpoints after committing rows.
func positions[T any](rows []Row[T]) ([]int16, []int64) {
	var buckets []int16
	var lasts []int64
	for _, r := range rows {
		b := int16(bucketOf(r.Key))
		if n := len(buckets); n > 0 && buckets[n-1] == b {
			lasts[n-1] = max(lasts[n-1], r.Key)
			continue
		}
		buckets = append(buckets, b)
		lasts = append(lasts, r.Key)
	}
	return buckets, lasts
}

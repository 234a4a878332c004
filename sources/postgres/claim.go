package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shardflow/shardflow/dataflow"
)

// ProcessFunc processes one row in claim mode. nil marks the row done; an
// error marks a failed attempt (retried up to MaxAttempts, then 'failed'
// with the error's text). A panic is not recovered here; the dataflow Node
// recovers it and the row's claim is reclaimed after the lease.
type ProcessFunc[T any] func(ctx context.Context, shard dataflow.Shard, item T) error

// markTimeout bounds the done/failure marks, which run even after the
// run's context is cancelled so that finished work is recorded.
const markTimeout = 10 * time.Second

// ClaimJob is the claim mode: a dataflow.BatchJob[Row[T]] that claims rows
// in Fetch and marks them in ProcessBatch. Delivery is at least once: a row
// whose claimer dies before its done mark is processed again by the item's
// next owner. Safe for concurrent use.
type ClaimJob[T any] struct {
	src     *Source[T]
	process ProcessFunc[T]
	cursors cursors
}

// Claim returns the claim-mode job running process for each claimed row.
func (s *Source[T]) Claim(process ProcessFunc[T]) *ClaimJob[T] {
	return &ClaimJob[T]{src: s, process: process}
}

var _ dataflow.BatchJob[Row[int]] = (*ClaimJob[int])(nil)

// Fetch waits out the item's backoff step if a statement error opened
// one, checks ownership (on the item's first fetch under this epoch, then
// at most every min(Lease/4, 30s)), reclaims the item's rows held by a claimer other
// than (shard.ServerID, shard.Epoch) or older than Lease (a row past MaxAttempts
// becomes 'failed') when the fetch scans from the item's range start (the
// first fetch of a run, or after a short fetch) or at most every
// min(Lease/4, 30s) otherwise, then claims up to shard.FetchCount pending
// rows of the item's buckets, lowest key after the item's cursor first
// (key order, by the pending index: an item's buckets are runs of
// consecutive keys, so a batch's rows share a few heap pages), skipping
// rows locked by others. Both statements go in one round
// trip. A statement error (see Classify) opens a backoff step, reported
// once, and the fetch runs again after it, until it succeeds or ctx ends.
func (j *ClaimJob[T]) Fetch(ctx context.Context, shard dataflow.Shard) ([]Row[T], error) {
	s := j.src
	lo, hi, ok := BucketRange(shard.Item, shard.Total)
	if !ok || shard.FetchCount <= 0 {
		return nil, nil
	}
	ck := cursorKey{shard.JobName, shard.Item, shard.Total, shard.Epoch}
	// Claims carry (shard.ServerID, epoch) and a newer owner's sweep takes a
	// stale owner's claims back at once, so the check with the
	// coordinator (a sync and a read on ZooKeeper) only narrows the window
	// of duplicate work: once per run and item, then every reclaimEvery,
	// not per fetch. Losing the session cancels ctx anyway.
	if j.cursors.ownershipDue(ck, time.Now(), s.reclaimEvery()) {
		if err := shard.CheckOwnership(ctx); err != nil {
			return nil, fmt.Errorf("%w: job %s item %d epoch %d: %w", ErrFenced, shard.JobName, shard.Item, shard.Epoch, err)
		}
	}
	var out []Row[T]
	// Rows claimed by an attempt that then hit a statement error stay in
	// out: their claims are committed and must be processed.
	err := s.untilOK(ctx, shard, "claim", func(ctx context.Context) error {
		err := j.claim(ctx, shard, ck, lo, hi, &out)
		if err != nil && len(out) > 0 {
			s.cfg.Logger.Warn("sources/postgres: claim stopped early; processing the rows already claimed", "table", s.spec.Table,
				"job", shard.JobName, "item", shard.Item, "rows", len(out), "err", err)
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: claiming rows of table %s for job %s item %d: %w", s.spec.Table, shard.JobName, shard.Item, err)
	}
	if len(out) == 0 {
		s.statementOK(ctx, shard)
	}
	// In key order: RETURNING's order is the join's, and rows found behind
	// the cursor come last.
	slices.SortFunc(out, func(a, b Row[T]) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// claim appends to *out the rows of one claim pass (a reclaim sweep when
// due, then claims from the cursor, and from the range start when short).
func (j *ClaimJob[T]) claim(ctx context.Context, shard dataflow.Shard, ck cursorKey, lo, hi int, out *[]Row[T]) error {
	s := j.src
	pos := j.cursors.get(ck)
	for {
		// The sweep walks the index entries of claimed rows, which
		// include every row claimed and since done until vacuum: run
		// it when scanning from the range start or every reclaimEvery.
		sweep := j.cursors.reclaimDue(ck, pos.atStart(), time.Now(), s.reclaimEvery())
		b := &pgx.Batch{}
		if sweep {
			b.Queue(s.sql.reclaim, lo, hi, owner(shard), shard.Epoch, s.cfg.MaxAttempts, s.cfg.Lease.Seconds())
		}
		b.Queue(s.sql.claim, lo, hi, shard.FetchCount-len(*out), owner(shard), shard.Epoch, pos.bucket, pos.key)
		br := s.cfg.Pool.SendBatch(ctx, b)
		var reclaimed int64
		if sweep {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			reclaimed = tag.RowsAffected()
		}
		if reclaimed > 0 {
			s.cfg.Logger.Info("sources/postgres: reclaimed abandoned claims", "table", s.spec.Table,
				"job", shard.JobName, "item", shard.Item, "rows", reclaimed)
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		got, err := s.collect(rows)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		*out = append(*out, got...)
		j.cursors.advance(ck, keys(got))
		if len(*out) >= shard.FetchCount || (pos.atStart() && reclaimed == 0) {
			return nil
		}
		// Short after a cursor, or rows were just reclaimed: look
		// again from the range start.
		pos = start
		j.cursors.reset(ck)
	}
}

// ProcessBatch runs the ProcessFunc on each row in turn, then marks the
// successes done, the row failures (see Classify) failed and the rows that
// could not be read (Row.Err: set aside, 'failed' at once with their
// ReadError, never handed to the ProcessFunc) in one round trip, guarded by
// this claim (claimed_by = shard.ServerID and claim_epoch = shard.Epoch), so a
// row reclaimed meanwhile keeps its newer state. Rows not processed because
// ctx ended are released to 'pending' without counting an attempt; so are
// the row whose function returned a statement error and the rows after it,
// and the item backs off (the next Fetch waits) before they are claimed
// again.
// It returns the rows whose processing succeeded; the error is non-nil
// only when the marks could not be written (the rows will be reclaimed).
func (j *ClaimJob[T]) ProcessBatch(ctx context.Context, shard dataflow.Shard, items []Row[T]) (int, error) {
	s := j.src
	var done, failed, released, aside []int64
	var doneTIDs []pgtype.TID
	var errs, asideErrs []string
	var stmtErr error
	for _, it := range items {
		if it.readErr != nil {
			// Unreadable: set aside at once, whatever else happens.
			aside = append(aside, it.Key)
			asideErrs = append(asideErrs, it.readErr.Error())
			s.logSetAside(shard, it.readErr)
		}
	}
	for i, it := range items {
		if it.readErr != nil {
			continue
		}
		if ctx.Err() != nil {
			released = append(released, unread(items[i:])...)
			break
		}
		if err := j.process(ctx, shard, it.Value); err != nil {
			err = shard.HandleError(ctx, err)
			if Classify(err) == ClassStatement || ctx.Err() != nil {
				// Not this row's fault: it and the rest go back unpenalised.
				stmtErr = &ProcessError{Key: it.Key, Err: err}
				released = append(released, unread(items[i:])...)
				break
			}
			failed = append(failed, it.Key)
			errs = append(errs, err.Error())
			continue
		}
		done = append(done, it.Key)
		doneTIDs = append(doneTIDs, it.tid)
	}
	if len(failed) > 0 || len(released) > 0 {
		// Retried and released rows go back to pending behind the cursor.
		j.cursors.reset(cursorKey{shard.JobName, shard.Item, shard.Total, shard.Epoch})
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	err := retry(mctx, markTimeout, s.logRetry("mark", shard), func(ctx context.Context) error {
		b := &pgx.Batch{}
		var marked []int64
		if len(done) > 0 {
			b.Queue(s.sql.done, done, owner(shard), shard.Epoch, doneTIDs).Query(func(rows pgx.Rows) error {
				var err error
				marked, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				return err
			})
		}
		if len(failed) > 0 {
			b.Queue(s.sql.fail, failed, errs, owner(shard), shard.Epoch, s.cfg.MaxAttempts)
		}
		if len(released) > 0 {
			b.Queue(s.sql.release, released, owner(shard), shard.Epoch)
		}
		if len(aside) > 0 {
			b.Queue(s.sql.setAside, aside, asideErrs, owner(shard), shard.Epoch)
		}
		if b.Len() == 0 {
			return nil
		}
		if err := s.cfg.Pool.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		n := int64(len(marked))
		if moved := unmarked(done, marked); len(moved) > 0 {
			// Rows whose version moved since the claim (or refused).
			tag, err := s.cfg.Pool.Exec(ctx, s.sql.doneByKey, moved, owner(shard), shard.Epoch)
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		if n < int64(len(done)) {
			s.cfg.Logger.Warn("sources/postgres: done marks refused: the rows were reclaimed by a newer claimer",
				"table", s.spec.Table, "job", shard.JobName, "item", shard.Item, "epoch", shard.Epoch,
				"refused", int64(len(done))-n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sources/postgres: marking %d done and %d failed rows of table %s (job %s item %d): %w",
			len(done), len(failed)+len(aside), s.spec.Table, shard.JobName, shard.Item, err)
	}
	switch {
	case stmtErr != nil && ctx.Err() == nil:
		s.statementFailed(ctx, shard, "process", stmtErr)
	case stmtErr == nil && len(released) == 0:
		s.statementOK(ctx, shard)
	}
	return len(done), nil
}

func (s *Source[T]) logRetry(op string, shard dataflow.Shard) func(error, time.Duration) {
	return func(err error, wait time.Duration) {
		s.cfg.Logger.Warn("sources/postgres: transient error, retrying", "op", op, "table", s.spec.Table,
			"job", shard.JobName, "item", shard.Item, "wait", wait, "err", err)
	}
}

// reclaimEvery is how often a claim fetch that continues from its cursor
// also sweeps abandoned claims.
func (s *Source[T]) reclaimEvery() time.Duration { return min(s.cfg.Lease/4, 30*time.Second) }

// unread are the keys of rows that were read whole (a row set aside is
// never released: it is marked failed).
func unread[T any](rows []Row[T]) []int64 {
	var ks []int64
	for _, r := range rows {
		if r.readErr == nil {
			ks = append(ks, r.Key)
		}
	}
	return ks
}

// logSetAside logs a row set aside because it could not be read.
func (s *Source[T]) logSetAside(shard dataflow.Shard, e *ReadError) {
	s.cfg.Logger.Warn("sources/postgres: row cannot be read into the item type; set aside, the item goes on", "table", s.spec.Table,
		"job", shard.JobName, "item", shard.Item, "key", e.Key, "column", e.Column, "field", e.Field, "err", e.Err)
}

// unmarked are the keys of done not in marked.
func unmarked(done, marked []int64) []int64 {
	if len(marked) >= len(done) {
		return nil
	}
	in := make(map[int64]bool, len(marked))
	for _, k := range marked {
		in[k] = true
	}
	var out []int64
	for _, k := range done {
		if !in[k] {
			out = append(out, k)
		}
	}
	return out
}

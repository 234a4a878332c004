package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/dataflow"
)

// TxProcessFunc processes rows inside tx, the transaction that will also
// mark them done (transactional mode) or advance the checkpoint
// (checkpoint mode): write every effect with tx, so it commits or rolls
// back with the mark. Do not commit or roll back tx. An error rolls the
// whole slice back; the rows are then retried one per transaction to find
// the failing one, which counts an attempt.
type TxProcessFunc[T any] func(ctx context.Context, tx pgx.Tx, shard dataflow.Shard, items []T) error

// TxJob is the transactional mode: a dataflow.BatchJob[Row[T]] whose every
// slice is one transaction holding the rows' locks, the user's effects, the
// done mark and the fence. A row is marked done only by a transaction that
// locked it while pending, and that transaction also holds its effects, so
// effects written with the transaction happen exactly once. Safe for
// concurrent use.
type TxJob[T any] struct {
	src     *Source[T]
	process TxProcessFunc[T]
	cursors cursors
	holds   holds[T]
}

// Transactional returns the transactional-mode job.
func (s *Source[T]) Transactional(process TxProcessFunc[T]) *TxJob[T] {
	return &TxJob[T]{src: s, process: process}
}

var _ dataflow.BatchJob[Row[int]] = (*TxJob[int])(nil)

// userError marks an error returned by the user's function.
type userError struct{ err error }

func (e *userError) Error() string { return e.err.Error() }
func (e *userError) Unwrap() error { return e.err }

// Fetch waits out the item's backoff step if a statement error opened one,
// then reads up to shard.FetchCount pending rows of the item's buckets,
// lowest key first. Once the item's batches are seen to reach
// ProcessBatch whole (one worker per item), it begins the batch's
// transaction and reads, locks (skipping rows others hold) and marks the
// rows done in one statement, and the ProcessBatch that gets them commits
// that transaction (see held.go); with several workers per item
// (shard.Threads > 1) it does so for each slice in a transaction of its
// own (fetchSliced); otherwise it reads without locking and ProcessBatch
// locks. Key order,
// by the pending index Migrate creates, puts a batch's rows on a few
// consecutive heap pages: an item's buckets are runs of consecutive keys.
// A statement error (see Classify) opens a backoff step, reported once, and
// the read runs again after it, until it succeeds or ctx ends.
func (j *TxJob[T]) Fetch(ctx context.Context, shard dataflow.Shard) ([]Row[T], error) {
	s := j.src
	lo, hi, ok := BucketRange(shard.Item, shard.Total)
	if !ok || shard.FetchCount <= 0 {
		return nil, nil
	}
	ck := cursorKey{shard.JobName, shard.Item, shard.Total, shard.Epoch}
	if s.backoff.wait(ctx, keyOf(shard)) == nil {
		if shard.Threads > 1 {
			// The engine cuts the batch where its Fetch did (Slices):
			// one transaction per slice, each read, locked and marked in
			// one statement.
			if g := j.holds.reserveGroup(ctx, shard); g != nil {
				return j.fetchSliced(ctx, shard, ck, lo, hi, g)
			}
		} else if e := j.holds.reserve(ctx, shard); e != nil {
			// The item's batches arrive whole: read, lock and mark in one
			// statement of the batch's transaction (held.go).
			return j.fetchLocked(ctx, shard, ck, lo, hi, e)
		}
	}
	var out []Row[T]
	err := s.untilOK(ctx, shard, "fetch", func(ctx context.Context) error {
		pos := j.cursors.get(ck)
		for {
			rows, err := s.cfg.Pool.Query(ctx, s.sql.pending, lo, hi, shard.FetchCount, pos.key, pos.bucket)
			if err != nil {
				return err
			}
			out, err = s.collect(rows)
			if err != nil {
				return err
			}
			j.cursors.advance(ck, keys(out))
			if len(out) >= shard.FetchCount || pos.atStart() {
				return nil
			}
			// Short after a cursor: rows may be pending behind it
			// (failed attempts, rows another owner held): rescan.
			pos = start
			j.cursors.reset(ck)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: reading pending rows of table %s for job %s item %d: %w", s.spec.Table, shard.JobName, shard.Item, err)
	}
	if len(out) == 0 {
		s.statementOK(ctx, shard)
	}
	j.holds.fetchedTwoPass(shard, out)
	return out, nil
}

// fetchLocked is Fetch in one statement: it begins the batch's
// transaction and locks and marks done up to shard.FetchCount pending rows
// of the item's buckets, lowest key after the cursor first (from the
// range start too when that finds fewer), skipping rows locked by others,
// and holds the transaction in e for the ProcessBatch that gets the rows.
// No rows, or an error: the transaction is rolled back and e released.
func (j *TxJob[T]) fetchLocked(ctx context.Context, shard dataflow.Shard, ck cursorKey, lo, hi int, e *held[T]) ([]Row[T], error) {
	s := j.src
	var tx pgx.Tx
	var inCommit bool
	var out []Row[T]
	kept := false
	defer func() {
		if !kept { // no rows, an error, or a panic
			j.holds.release(holdKey(shard), e)
		}
	}()
	err := s.untilOK(ctx, shard, "fetch", func(ctx context.Context) error {
		var err error
		tx, inCommit, out, err = j.lockMark(ctx, shard, ck, lo, hi, nil)
		return err
	})
	if err != nil || len(out) == 0 {
		if err != nil {
			return nil, fmt.Errorf("sources/postgres: locking pending rows of table %s for job %s item %d: %w", s.spec.Table, shard.JobName, shard.Item, err)
		}
		s.statementOK(ctx, shard)
		return nil, nil
	}
	j.holds.fetched(ctx, j, shard, e, tx, inCommit, out)
	kept = true
	return out, nil
}

// fetchSliced is Fetch in slices, for shard.Threads workers: up to
// shard.Threads transactions, one after the other, each begun with the
// statement that reads, locks and marks its share of shard.FetchCount
// rows after the previous one's (lockMark), kept in g for the
// ProcessBatch of that slice (Slices tells the engine where they are
// cut). It stops at a short share: the item has no more rows to give. No
// rows, or an error: every transaction is rolled back.
func (j *TxJob[T]) fetchSliced(ctx context.Context, shard dataflow.Shard, ck cursorKey, lo, hi int, g *group[T]) ([]Row[T], error) {
	s := j.src
	kept := false
	defer func() {
		if !kept { // no rows, an error, or a panic
			j.dropGroup(shard, g)
		}
	}()
	var out []Row[T]
	n := shard.Threads
	for i := range n {
		share := shard
		share.FetchCount = shard.FetchCount*(i+1)/n - shard.FetchCount*i/n
		if share.FetchCount == 0 {
			continue
		}
		var tx pgx.Tx
		var inCommit bool
		var rows []Row[T]
		if i == 0 {
			err := s.untilOK(ctx, shard, "fetch", func(ctx context.Context) error {
				var err error
				tx, inCommit, rows, err = j.lockMark(ctx, share, ck, lo, hi, nil)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("sources/postgres: locking pending rows of table %s for job %s item %d: %w", s.spec.Table, shard.JobName, shard.Item, err)
			}
		} else {
			// Holding the earlier slices' connections, this one waits
			// for a connection only briefly: items fetching at once on a
			// small pool must not each hold some and wait for the rest.
			// Without one, or on an error, the batch ends here.
			actx, cancel := context.WithTimeout(ctx, sliceConnWait)
			conn, err := s.cfg.Pool.Acquire(actx)
			cancel()
			if err != nil {
				break
			}
			if tx, inCommit, rows, err = j.lockMark(ctx, share, ck, lo, hi, conn); err != nil {
				break
			}
		}
		if len(rows) == 0 {
			break
		}
		j.holds.addPart(g, tx, inCommit, rows)
		out = append(out, rows...)
		if len(rows) < share.FetchCount {
			break
		}
	}
	if len(out) == 0 {
		s.statementOK(ctx, shard)
		return nil, nil
	}
	j.holds.fetchedGroup(ctx, j, shard, g)
	kept = true
	return out, nil
}

// sliceConnWait bounds fetchSliced's wait for the connection of each slice
// after the first.
const sliceConnWait = 50 * time.Millisecond

// releasingTx is a transaction on a connection acquired from the pool,
// released when the transaction ends (as pgxpool's own Tx does).
type releasingTx struct {
	pgx.Tx
	conn *pgxpool.Conn
	once sync.Once
}

func (t *releasingTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.once.Do(t.conn.Release)
	return err
}

func (t *releasingTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.once.Do(t.conn.Release)
	return err
}

// Slices is dataflow.BatchSlicer: a batch fetched in slices (fetchSliced)
// is cut where its transactions are, each slice's ProcessBatch committing
// its own; nil for any other batch (the engine's cut).
func (j *TxJob[T]) Slices(shard dataflow.Shard, items []Row[T]) []int {
	return j.holds.ends(shard, items)
}

var _ dataflow.BatchSlicer[Row[int]] = (*TxJob[int])(nil)

// lockMark runs fetchLocked's statements: BEGIN and lockMark from the
// cursor in one round trip, and lockMark from the range start when that
// came back short after a cursor (the rows it just marked are done in its
// transaction, so not taken again). It returns the open transaction with
// its rows, or no rows and no transaction (rolled back).
//
// On conn, when not nil (a connection fetchSliced acquired), else on one
// of the pool's; conn is released when the transaction ends.
func (j *TxJob[T]) lockMark(ctx context.Context, shard dataflow.Shard, ck cursorKey, lo, hi int, conn *pgxpool.Conn) (tx pgx.Tx, inCommit bool, out []Row[T], err error) {
	s := j.src
	var opts pgx.TxOptions
	opts, inCommit = s.batchTxOptions(shard)
	pos := j.cursors.get(ck)
	b := &pgx.Batch{}
	b.BeginTx(opts)
	b.Queue(s.sql.lockMark, lo, hi, shard.FetchCount, owner(shard), shard.Epoch, pos.key, pos.bucket)
	var br pgx.BatchResults
	var open pgx.Tx
	if conn != nil {
		br = conn.SendBatch(ctx, b)
		open = &releasingTx{Tx: br.Tx(), conn: conn}
	} else {
		br = s.cfg.Pool.SendBatch(ctx, b)
		open = br.Tx()
	}
	keep := false
	defer func() {
		if !keep {
			open.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a failed rollback closes the connection
		}
	}()
	if out, err = j.readLocked(br); err != nil {
		return nil, false, nil, err
	}
	if len(out) < shard.FetchCount && !pos.atStart() {
		// Short after a cursor: rows may be pending behind it (failed
		// attempts, rows another owner held).
		rows, err := open.Query(ctx, s.sql.lockMark, lo, hi, shard.FetchCount-len(out), owner(shard), shard.Epoch, start.key, start.bucket)
		if err != nil {
			return nil, false, nil, err
		}
		more, err := s.collect(rows)
		if err != nil {
			return nil, false, nil, err
		}
		out = append(out, more...)
		j.cursors.reset(ck)
		j.cursors.advance(ck, keys(more))
	} else {
		j.cursors.advance(ck, keys(out))
	}
	if len(out) == 0 {
		return nil, false, nil, nil
	}
	// In key order, as the two-pass read: RETURNING's order is the
	// join's, and rows found behind the cursor come last.
	slices.SortFunc(out, func(a, b Row[T]) int { return cmp.Compare(a.Key, b.Key) })
	keep = true
	return open, inCommit, out, nil
}

// readLocked reads the results of lockMark's first round trip: BEGIN, then
// the rows locked and marked.
func (j *TxJob[T]) readLocked(br pgx.BatchResults) ([]Row[T], error) {
	return readAfterBegin(br, j.src.collect)
}

// ProcessBatch commits items in one transaction: the one their Fetch
// opened, which locked and marked them, when they are its batch whole;
// else (the Fetch's transaction, if any, rolled back first) lock the rows still
// pending in this item's buckets and mark them done in one statement (FOR
// UPDATE SKIP LOCKED; rows another transaction holds or finished are
// skipped and returned as a *dataflow.Skipped, counted neither as
// successes nor as failures: they are another batch's work, counted where
// it is done — with PipelinedFetch a Fetch rescanning from the range start
// reads rows the item's previous batch still holds), run the TxProcessFunc
// on them, fence (FenceTx), commit. If the function fails with a row error (see
// Classify), each row is retried in its own transaction and a failing
// row's attempt is recorded (after MaxAttempts it is marked 'failed' with
// the error). A statement error (the function's or the source's: an
// undefined sink table, a lost connection...) rolls the slice back with
// no attempt counted, opens a backoff step (reported once) and returns
// the rows committed so far with a nil error: the rest stay pending for
// the next Fetch, which waits the step out. ErrFenced fails the slice
// with nothing committed for it. Rows that could not be read (Row.Err) are
// first set aside: marked 'failed' at once with their ReadError in a
// fenced transaction of their own, never handed to the TxProcessFunc, and
// counted as failures.
func (j *TxJob[T]) ProcessBatch(ctx context.Context, shard dataflow.Shard, items []Row[T]) (int, error) {
	n, skipped, err := j.processBatch(ctx, shard, items)
	if err == nil && skipped > 0 {
		return n, &dataflow.Skipped{N: skipped}
	}
	return n, err
}

// processBatch is ProcessBatch, returning the rows committed and the rows
// skipped (not pending in this item's buckets, or held by another
// transaction, when this slice locked them).
func (j *TxJob[T]) processBatch(ctx context.Context, shard dataflow.Shard, items []Row[T]) (n, skipped int, err error) {
	s := j.src
	if e, use, rollback := j.holds.take(shard, items); use {
		n, skipped, err, ue := j.processHeld(ctx, shard, e, items)
		if ue == nil {
			return n, skipped, err
		}
		// A row error: the batch rolled back; each row in its own
		// transaction, as below.
		return j.retryRows(ctx, shard, items, ue)
	} else if e != nil {
		// Fetched in one statement but not processed whole (several
		// workers): the rows go back to pending first.
		if err := j.unhold(ctx, shard, e, rollback); err != nil {
			return 0, 0, err
		}
	}
	// A slice that is its fetch whole shows that the item's next Fetch
	// may lock its rows itself.
	j.holds.learn(shard, items)
	items, err = j.setAside(ctx, shard, items)
	if err != nil {
		if s.backedOff(ctx, shard, err) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if len(items) == 0 {
		return 0, 0, nil
	}
	n, err = j.commit(ctx, shard, items)
	if err == nil {
		s.statementOK(ctx, shard)
		return n, len(items) - n, nil
	}
	if s.backedOff(ctx, shard, err) {
		return 0, 0, nil
	}
	var ue *userError
	if !errors.As(err, &ue) {
		return 0, 0, err
	}
	return j.retryRows(ctx, shard, items, ue)
}

// processHeld finishes a batch fetched in one statement (e holds its
// transaction, taken by ProcessBatch): rows that could not be read set
// aside and the rest committed by the two-pass path (the transaction
// rolled back first); else the function, the fence and the commit in e's
// transaction. A row error rolls the batch back and returns ue, for
// retryRows; other outcomes are processBatch's.
func (j *TxJob[T]) processHeld(ctx context.Context, shard dataflow.Shard, e *held[T], items []Row[T]) (n, skipped int, err error, ue *userError) {
	s := j.src
	k := holdKey(shard)
	ended := false
	end := func(committed bool) {
		if !ended {
			ended = true
			if !committed {
				j.rollback(e)
			}
			j.holds.release(k, e)
		}
	}
	defer end(false)
	for _, it := range items {
		if it.readErr != nil {
			end(false)
			items, err := j.setAside(ctx, shard, items)
			if err == nil && len(items) > 0 {
				n, err = j.commit(ctx, shard, items)
			}
			if err == nil {
				s.statementOK(ctx, shard)
				return n, len(items) - n, nil, nil
			}
			if s.backedOff(ctx, shard, err) {
				return 0, 0, nil, nil
			}
			if errors.As(err, &ue) {
				return 0, 0, nil, ue
			}
			return 0, 0, err, nil
		}
	}
	err = j.finish(ctx, e.tx, shard, items, e.inCommit)
	end(err == nil)
	if err == nil {
		s.statementOK(ctx, shard)
		return len(items), 0, nil, nil
	}
	if s.backedOff(ctx, shard, err) {
		return 0, 0, nil, nil
	}
	if errors.As(err, &ue) {
		return 0, 0, nil, ue
	}
	return 0, 0, err, nil
}

// retryRows commits each of items in its own transaction after the slice
// failed with ue, recording the attempt of each row that fails (see
// ProcessBatch). It returns the rows committed and the rows skipped (no
// longer pending, or held by another transaction).
func (j *TxJob[T]) retryRows(ctx context.Context, shard dataflow.Shard, items []Row[T], ue *userError) (succeeded, skipped int, err error) {
	s := j.src
	for _, it := range items {
		err := error(ue)
		n := 0
		if len(items) > 1 { // a lone row's failure is already known
			n, err = j.commit(ctx, shard, []Row[T]{it})
		}
		if err == nil {
			succeeded += n
			skipped += 1 - n
			continue
		}
		if errors.As(err, &ue) {
			err = j.recordFailure(ctx, shard, it.Key, ue.err)
		}
		if errors.Is(err, errRowFailed) {
			s.cfg.Logger.Warn("sources/postgres: row processing failed", "table", s.spec.Table,
				"job", shard.JobName, "item", shard.Item, "err", err)
			continue
		}
		if s.backedOff(ctx, shard, err) {
			return succeeded, skipped, nil
		}
		// Fenced or ctx ended: the remaining rows stay pending.
		if succeeded == 0 {
			return 0, 0, err
		}
		s.cfg.Logger.Warn("sources/postgres: slice stopped; its remaining rows stay pending", "table", s.spec.Table,
			"job", shard.JobName, "item", shard.Item, "err", err)
		return succeeded, skipped, nil
	}
	return succeeded, skipped, nil
}

// backedOff reports whether err, from a transaction of shard's batch, is a
// statement error (and ctx is live): then it opens (or joins) a backoff
// step and reports it. A fencing refusal and a row error are not.
func (s *Source[T]) backedOff(ctx context.Context, shard dataflow.Shard, err error) bool {
	var ue *userError
	if ctx.Err() != nil || errors.Is(err, ErrFenced) || errors.As(err, &ue) || Classify(err) != ClassStatement {
		return false
	}
	s.statementFailed(ctx, shard, "commit", err)
	return true
}

// afterFence, when set (tests), runs between a batch's fence and its
// commit: after its ownership check, and after its fence row when that is
// not written with the COMMIT (see commit).
var afterFence func()

var errRowFailed = errors.New("sources/postgres: row processing failed")

// commit locks those of items still pending in shard's buckets and not
// held by another transaction, runs the TxProcessFunc on them, fences and
// commits; it returns how many it committed (the others are skipped:
// another's work, or done already).
func (j *TxJob[T]) commit(ctx context.Context, shard dataflow.Shard, items []Row[T]) (int, error) {
	s := j.src
	lo, hi, ok := BucketRange(shard.Item, shard.Total)
	if !ok {
		return 0, nil
	}
	// One round trip begins the transaction, locks the rows and marks them
	// done. The commit writes the fence row when the source knows it
	// fences without a coordination guard (fenceInCommit): one more.
	opts, inCommit := s.batchTxOptions(shard)
	b := &pgx.Batch{}
	b.BeginTx(opts)
	b.Queue(s.sql.lockDone, keys(items), lo, hi, owner(shard), shard.Epoch)
	br := s.cfg.Pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	locked, err := readBegin(br)
	if err != nil {
		return 0, fmt.Errorf("sources/postgres: locking and marking rows of table %s done: %w", s.spec.Table, err)
	}
	if len(locked) == 0 {
		return 0, nil
	}
	mine := items
	if len(locked) < len(items) {
		set := make(map[int64]bool, len(locked))
		for _, k := range locked {
			set[k] = true
		}
		mine = make([]Row[T], 0, len(locked))
		for _, it := range items {
			if set[it.Key] {
				mine = append(mine, it)
			}
		}
		s.cfg.Logger.Debug("sources/postgres: rows taken by another owner skipped", "table", s.spec.Table,
			"job", shard.JobName, "item", shard.Item, "skipped", len(items)-len(locked))
	}
	if err := j.finish(ctx, tx, shard, mine, inCommit); err != nil {
		return 0, err
	}
	return len(mine), nil
}

// finish runs the TxProcessFunc on rows in tx, which holds their locks and
// done marks, fences and commits tx (inCommit: its commit writes the fence
// row). The caller rolls tx back on an error.
func (j *TxJob[T]) finish(ctx context.Context, tx pgx.Tx, shard dataflow.Shard, rows []Row[T], inCommit bool) error {
	s := j.src
	if err := j.process(ctx, tx, shard, values(rows)); err != nil {
		err = shard.HandleError(ctx, err)
		if Classify(err) == ClassStatement || ctx.Err() != nil {
			return fmt.Errorf("sources/postgres: processing rows of table %s: %w", s.spec.Table, err)
		}
		return &userError{err: err}
	}
	owed, err := s.checkFence(ctx, tx, shard)
	if err != nil {
		return err
	}
	if owed && !inCommit {
		if err := writeFence(ctx, tx, shard); err != nil {
			if errors.Is(err, ErrFenced) {
				s.fenced.refused(shard)
			}
			return err
		}
	}
	if afterFence != nil {
		afterFence()
	}
	if err := tx.Commit(ctx); err != nil {
		if fenceRefused(err) {
			s.fenced.refused(shard)
			return refusedErr(shard)
		}
		return fmt.Errorf("sources/postgres: committing rows of table %s (job %s item %d): %w", s.spec.Table, shard.JobName, shard.Item, err)
	}
	if owed {
		// The fence row holds shard.Epoch: the item's later commits at
		// this epoch lock it FOR SHARE (fenceStatement).
		s.fenced.committed(shard)
	}
	return nil
}

// readBegin reads the results of a batch's first round trip (see commit):
// BEGIN, then the keys locked.
func readBegin(br pgx.BatchResults) ([]int64, error) {
	return readAfterBegin(br, func(rows pgx.Rows) ([]int64, error) { return pgx.CollectRows(rows, pgx.RowTo[int64]) })
}

// readAfterBegin reads a first round trip that opens a transaction: the
// BEGIN's result, then one query's rows through collect; the batch is
// closed either way, its error kept when nothing failed before.
func readAfterBegin[R any](br pgx.BatchResults, collect func(pgx.Rows) ([]R, error)) (out []R, err error) {
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return collect(rows)
}

// recordFailure counts an attempt of row key in its own fenced transaction
// and returns an error wrapping errRowFailed and the user's error.
func (j *TxJob[T]) recordFailure(ctx context.Context, shard dataflow.Shard, key int64, perr error) error {
	s := j.src
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.txFail, key, perr.Error(), owner(shard), shard.Epoch, s.cfg.MaxAttempts); err != nil {
			return err
		}
		return s.fence(ctx, tx, shard)
	})
	if err != nil {
		return fmt.Errorf("sources/postgres: recording the failure of row %d of table %s (%v): %w", key, s.spec.Table, perr, err)
	}
	return fmt.Errorf("%w: %w", errRowFailed, &ProcessError{Key: key, Err: perr})
}

// setAside marks the rows of items that could not be read 'failed' with
// their ReadError, in one fenced transaction, and returns the others.
func (j *TxJob[T]) setAside(ctx context.Context, shard dataflow.Shard, items []Row[T]) ([]Row[T], error) {
	s := j.src
	var good []Row[T]
	var bad []int64
	var errs []string
	for _, it := range items {
		if it.readErr == nil {
			good = append(good, it)
			continue
		}
		bad = append(bad, it.Key)
		errs = append(errs, it.readErr.Error())
		s.logSetAside(shard, it.readErr)
	}
	if len(bad) == 0 {
		return items, nil
	}
	lo, hi, _ := BucketRange(shard.Item, shard.Total)
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.txSetAside, bad, errs, owner(shard), shard.Epoch, lo, hi); err != nil {
			return err
		}
		return s.fence(ctx, tx, shard)
	})
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: setting aside %d unreadable rows of table %s (job %s item %d): %w", len(bad), s.spec.Table, shard.JobName, shard.Item, err)
	}
	return good, nil
}

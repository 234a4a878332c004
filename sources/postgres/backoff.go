package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/usererr"
)

// firstBackoff is the wait after the first statement error of a streak;
// each further step doubles it, up to Config.MaxBackoff.
const firstBackoff = 250 * time.Millisecond

// backoffs hold, per job and shard item, the streak of statement errors
// (see Classify) the item's batches are backing off from. A streak spans
// runs: a new run of the item waits out the current step first.
type backoffs struct {
	mu sync.Mutex
	m  map[backoffKey]*streak
}

type backoffKey struct {
	job  string
	item int
}

type streak struct {
	step  int
	until time.Time
	err   error // the last statement error of the streak
}

// fail records a statement error of k's batch at now and returns the
// step of the streak and how long to wait before retrying. opened is
// true when this call opened the step, false when the item is already
// waiting out one (another slice of the same batch failed the same way):
// only the caller that opened the step reports it.
func (b *backoffs) fail(k backoffKey, now time.Time, maxWait, fixed time.Duration, err error) (step int, wait time.Duration, opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[backoffKey]*streak{}
	}
	s := b.m[k]
	if s == nil {
		s = &streak{}
		b.m[k] = s
	}
	s.err = err
	if now.Before(s.until) {
		return s.step, s.until.Sub(now), false
	}
	s.step++
	full := maxWait
	if s.step < 32 {
		full = min(firstBackoff<<(s.step-1), maxWait)
	}
	// Jitter in [full/2, full]: items of many servers failing together
	// do not retry in lockstep. A delay the user's RetryAfter asked for
	// replaces the step's.
	wait = full/2 + rand.N(full/2+1)
	if fixed > 0 {
		wait = fixed
	}
	s.until = now.Add(wait)
	return s.step, wait, true
}

// ok ends k's streak; it reports whether there was one.
func (b *backoffs) ok(k backoffKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.m[k]; !ok {
		return false
	}
	delete(b.m, k)
	return true
}

// cause returns the last statement error of k's streak, nil if none.
func (b *backoffs) cause(k backoffKey) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.m[k]; s != nil {
		return s.err
	}
	return nil
}

// wait blocks until k's current step is over, or ctx ends.
func (b *backoffs) wait(ctx context.Context, k backoffKey) error {
	b.mu.Lock()
	var until time.Time
	if s := b.m[k]; s != nil {
		until = s.until
	}
	b.mu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func keyOf(shard dataflow.Shard) backoffKey { return backoffKey{shard.JobName, shard.Item} }

// statementFailed handles a statement error of shard's batch (op names
// the step that failed): it opens a backoff step if none is open and
// reports it once per step, as one ERROR line and through
// shard.ReportError (the server's lastError in status). No row attempt
// is counted by the caller.
func (s *Source[T]) statementFailed(ctx context.Context, shard dataflow.Shard, op string, err error) {
	fixed, _ := usererr.RetryDelay(err)
	step, wait, opened := s.backoff.fail(keyOf(shard), time.Now(), s.cfg.MaxBackoff, fixed, err)
	if !opened {
		return
	}
	s.cfg.Logger.Error("sources/postgres: statement failed; no row attempt counted, the batch is retried after a backoff",
		"table", s.spec.Table, "job", shard.JobName, "item", shard.Item, "op", op, "step", step,
		"retry_in", wait.Round(time.Millisecond), "err", err)
	shard.ReportError(context.WithoutCancel(ctx), fmt.Errorf("%w: table %s item %d, %s (backoff step %d, retrying in %s): %w",
		ErrStatement, s.spec.Table, shard.Item, op, step, wait.Round(time.Millisecond), err))
}

// statementOK ends shard's streak of statement errors, if any, and clears
// the report.
func (s *Source[T]) statementOK(ctx context.Context, shard dataflow.Shard) {
	if s.backoff.ok(keyOf(shard)) {
		s.cfg.Logger.Info("sources/postgres: statements succeed again", "table", s.spec.Table, "job", shard.JobName, "item", shard.Item)
		shard.ReportError(context.WithoutCancel(ctx), nil)
	}
}

// withCause is err, the end of a run's ctx while its item backs off, with
// the statement error being backed off from: last, this call's, else
// streak, the one behind a step an earlier call opened (the item's
// previous run, another slice). The run's error then says why the item
// was waiting.
func withCause(err, last, streak error) error {
	if last == nil {
		last = streak
	}
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (while backing off from: %w)", err, last)
}

// untilOK runs fn, the item's fetch statement, until it succeeds, fails
// with an error that is not a statement error (returned), or ctx ends;
// each statement error opens a backoff step (reported once) and fn runs
// again after it.
func (s *Source[T]) untilOK(ctx context.Context, shard dataflow.Shard, op string, fn func(context.Context) error) error {
	k := keyOf(shard)
	var last error // the statement error being backed off from
	for {
		if err := s.backoff.wait(ctx, k); err != nil {
			return withCause(err, last, s.backoff.cause(k))
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// ctx ended in the statement, as it could in a wait.
			return withCause(err, last, s.backoff.cause(k))
		}
		if Classify(err) != ClassStatement {
			return err
		}
		s.statementFailed(ctx, shard, op, err)
		last = err
	}
}

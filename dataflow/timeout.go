package dataflow

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout: a shard item's run took longer than the job's ItemTimeout
// and was cancelled. Unwrap *TimeoutError for the limit.
var ErrTimeout = errors.New("dataflow: shard item run timed out; raise JobConfig.ItemTimeout (itemTimeout in the store) or make the run faster")

// TimeoutError is the cause of a shard item's context cancelled by the
// job's ItemTimeout (context.Cause returns it), and the item's error in
// the run's result. It unwraps to ErrTimeout.
type TimeoutError struct {
	// After is the ItemTimeout that passed.
	After time.Duration
}

// Error says "timed out after D".
func (e *TimeoutError) Error() string { return fmt.Sprintf("timed out after %s", e.After) }

// Unwrap makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// itemTimeoutCause returns the *TimeoutError that cancelled ctx, or nil.
func itemTimeoutCause(ctx context.Context) *TimeoutError {
	var te *TimeoutError
	if errors.As(context.Cause(ctx), &te) {
		return te
	}
	return nil
}

// withItemTimeout bounds one shard item's run by cfg.ItemTimeout. finish
// must be called when the item's run is over: if the timeout cancelled it,
// the item's error becomes the *TimeoutError (followed by the error the
// item had before, if any: often the cause) and one failure is counted,
// unless user code already returned the timeout (as a simple job does,
// which counted its failure itself).
// noFinish is withItemTimeout's finish without a timeout: a func value
// shared by every run, not one made per item.
var noFinish = func() {}

func (r *itemRun[T]) withItemTimeout(ctx context.Context) (context.Context, func()) {
	d := r.e.cfg.ItemTimeout
	if d <= 0 {
		return ctx, noFinish
	}
	ictx, cancel := context.WithTimeoutCause(ctx, d, &TimeoutError{After: d})
	return ictx, func() {
		te := itemTimeoutCause(ictx)
		cancel()
		if te == nil {
			return
		}
		var err error = te
		if prev := r.err.Load(); prev == nil || !errors.Is(prev.Err, ErrTimeout) {
			r.count(0, 1)
			if prev != nil {
				// What the item was doing when its time ran out (a fetch
				// backing off a failing statement...) is often the cause.
				err = fmt.Errorf("%w; %s: %w", te, prev.Op, prev.Err)
			}
		}
		r.err.Store(&ItemError{Job: r.e.cfg.JobName, Item: r.shard.Item, Op: "run", Err: err})
	}
}

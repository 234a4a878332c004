package dataflow

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// What stops what. An error of user code never stops the Node:
//   - a row (one item of a Fetch): Process's error, or one row's error inside
//     a source's function, counts one failure of that item and the others
//     go on. A source that tracks attempts (sources/postgres) counts one
//     attempt and fails the row after its MaxAttempts, unless the error is
//     infrastructure's (a lost connection, a timeout, a cancelled context:
//     postgres.Classify), which counts no attempt and backs the item off.
//     Permanent and RetryAfter override that classification.
//   - a shard item's run: Fetch's error, ProcessBatch's error for its
//     slice, or ItemTimeout passing end that item's run in this trigger;
//     the next trigger runs it again.
//   - a run: only losing the items (the context given to Fetch and Process
//     is cancelled) or a stop. The run's errors go to the job's error policy
//     (JobConfig.ErrorPolicy) and, under ErrorPolicyReturn, to the
//     listeners and NodeConfig.OnError.

// permanentError marks an error of user code as the row's own: a source
// counts an attempt and, after its MaxAttempts, fails the row, whatever
// the cause (a timeout of the row's outbound call, say). Make one with
// Permanent.
type permanentError struct{ Err error }

// Error returns the wrapped error's text.
func (e *permanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *permanentError) Unwrap() error { return e.Err }

// Permanent marks err as the row's own failure (see permanentError). It
// returns nil for nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{Err: err}
}

// retryError marks an error of user code as passing: a source counts no
// attempt, gives the row back and retries the item's batch after Delay
// (instead of its own backoff). Make one with RetryAfter.
type retryError struct {
	Err   error
	Delay time.Duration
}

// Error returns the wrapped error's text with the delay.
func (e *retryError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Delay)
}

// Unwrap returns the wrapped error.
func (e *retryError) Unwrap() error { return e.Err }

// RetryAfter marks err as passing, to retry after d without counting an
// attempt (see retryError); d <= 0 leaves the delay to the source's
// backoff. It returns nil for nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryError{Err: err, Delay: max(d, 0)}
}

// IsPermanent reports whether the outermost mark in err's chain is
// Permanent's. Sources call it before classifying an error themselves.
func IsPermanent(err error) bool {
	perm, _, marked := markOf(err)
	return marked && perm
}

// RetryDelay reports whether the outermost mark in err's chain is
// RetryAfter's, and its delay (0: the source's own backoff).
func RetryDelay(err error) (time.Duration, bool) {
	perm, d, marked := markOf(err)
	return d, marked && !perm
}

// markOf finds the outermost Permanent or RetryAfter mark in err's chain.
func markOf(err error) (permanent bool, delay time.Duration, marked bool) {
	for err != nil {
		switch e := err.(type) {
		case *permanentError:
			return true, 0, true
		case *retryError:
			return false, e.Delay, true
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, inner := range j.Unwrap() {
				if p, d, m := markOf(inner); m {
					return p, d, true
				}
			}
			return false, 0, false
		}
		err = errors.Unwrap(err)
	}
	return false, 0, false
}

// ErrorHandler is the Node-level error handler (NodeConfig.ErrorHandler):
// it sees every error of user code on this Node before it is acted on (an
// error of Fetch, Process or ProcessBatch, and the errors sources hand it
// through Shard.HandleError: each row's error of a sources/postgres job's
// function) and returns the error to act on: err itself, or err marked
// with Permanent or RetryAfter. A nil return keeps err. It is called
// from the run's goroutines, concurrently; keep it short.
type ErrorHandler func(ctx context.Context, shard Shard, err error) error

// HandleError passes err through the Node's ErrorHandler and returns the
// error to act on (err itself without a handler, or when the handler
// returns nil). Sources call it on the errors of the user's function
// before classifying them.
func (s Shard) HandleError(ctx context.Context, err error) error {
	if err == nil || s.handle == nil {
		return err
	}
	if out := s.handle(ctx, s, err); out != nil {
		return out
	}
	return err
}

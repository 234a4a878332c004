// Package usererr holds the marks user code puts on its errors
// (dataflow.Permanent, dataflow.RetryAfter) and the reading of them that
// sources do before classifying an error themselves. It is internal so that
// users see one way to mark an error, in package dataflow.
package usererr

import (
	"errors"
	"fmt"
	"time"
)

// PermanentError marks an error of user code as the row's own: a source
// counts an attempt and, after its MaxAttempts, fails the row, whatever
// the cause (a timeout of the row's outbound call, say).
type PermanentError struct{ Err error }

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryError marks an error of user code as passing: a source counts no
// attempt, gives the row back and retries the item's batch after Delay
// (instead of its own backoff).
type RetryError struct {
	Err   error
	Delay time.Duration
}

// Error returns the wrapped error's text with the delay.
func (e *RetryError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Delay)
}

// Unwrap returns the wrapped error.
func (e *RetryError) Unwrap() error { return e.Err }

// Permanent wraps err in a *PermanentError; nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// RetryAfter wraps err in a *RetryError with delay max(d, 0); nil stays nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, Delay: max(d, 0)}
}

// IsPermanent reports whether the outermost mark in err's chain is
// Permanent's.
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

// markOf finds the outermost mark in err's chain; through an error joining
// several, the first marked one.
func markOf(err error) (permanent bool, delay time.Duration, marked bool) {
	for err != nil {
		switch e := err.(type) {
		case *PermanentError:
			return true, 0, true
		case *RetryError:
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

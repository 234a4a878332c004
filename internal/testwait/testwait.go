// Package testwait is shardflow's one way for a test to wait: for a
// condition polled with a deadline (For, ForNoError, Poll) or for a signal on
// a channel (Recv). On failure it says what was awaited, for how long, and
// the condition's last answer, instead of a bare "timed out".
//
// Prefer a signal (a channel the code closes or sends on when something
// happened: resharded, elected, queued, config applied) and Recv; poll only
// what has no signal, such as the state of another process or server. Never
// sleep to let time pass: run the test in a testing/synctest bubble, where
// the clock is fake (the functions here work inside one).
package testwait

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TB is the part of testing.TB the functions use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// maxPause bounds the pause between two checks: the first checks follow
// each other closely (1 ms, doubling), so a condition that holds soon is
// seen soon, and a long wait costs a check per maxPause at most.
const maxPause = 100 * time.Millisecond

// errNotYet is the last answer of a boolean condition that never held.
var errNotYet = errors.New("condition still false")

// Poll calls cond until it returns nil or ctx ends. It returns nil, or ctx's
// error with cond's last error. The pause between calls starts at 1 ms and
// doubles up to 100 ms.
func Poll(ctx context.Context, cond func(context.Context) error) error {
	for pause := time.Millisecond; ; pause = min(2*pause, maxPause) {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// ForNoError waits up to timeout for cond to return nil, and fails t with
// what, the time waited and cond's last error if it never does. It must be
// called from the test's goroutine.
func ForNoError(t TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("testwait: waited %v for %s: %v", time.Since(start).Round(time.Millisecond), what, err)
	}
}

// For waits up to timeout for cond to return true, and fails t with what
// and the time waited if it never does. It must be called from the test's
// goroutine.
func For(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ForNoError(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Recv waits up to timeout for a value on ch (or for ch to be closed) and
// returns it; it fails t naming what was awaited if none comes. It must be
// called from the test's goroutine.
func Recv[V any](t TB, timeout time.Duration, what string, ch <-chan V) V {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("testwait: waited %v for %s: no signal", timeout, what)
		var zero V
		return zero
	}
}

package coordtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardflow/shardflow/internal/storecount"
)

// errStalled is the cause of a stallCtx ended by lack of progress.
var errStalled = errors.New("stalled")

// stallCtx returns the ctx of one of the simulation's own calls on the real
// stores (an admin action, a status read, a fencing check, a Close): it
// has no deadline, because how long a loaded machine takes is no finding
// (Postgres seeds 54200030, 54200035, 54200540, 54200543 failed "context
// deadline exceeded" on status and admin reads under a 20 s bound at load
// 45-100). It ends, with cause errStalled, only when the counted stores
// answer no request for stall: the session timeout, past which the store
// itself would take its server for gone (heartbeats are due every third of
// it). A slow call whose requests keep being answered runs to its end; a
// hung one ends.
func stallCtx(parent context.Context, stall time.Duration, stores ...*storecount.Store) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	replies := func() int64 {
		var n int64
		for _, st := range stores {
			n += st.Replies()
		}
		return n
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(stall / 8)
		defer tick.Stop()
		last, since := replies(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if n := replies(); n != last {
					last, since = n, now
				} else if now.Sub(since) >= stall {
					cancel(fmt.Errorf("%w: no request answered for %v", errStalled, stall))
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
	}
}

// withCause appends ctx's cause to err when ctx ended it (a stall says why).
func withCause(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w (%v)", err, c)
	}
	return err
}

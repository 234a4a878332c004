// Package signals holds a job's pending signals, each kind coalesced, and
// delivers them: to a function (OnSignal's) at the end of the job
// watcher's step, or on a channel through a goroutine that the first
// Channel call starts (a host of many jobs uses the function and pays for
// no goroutine per job).
package signals

import (
	"context"
	"sync"

	"github.com/shardflow/shardflow/internal/startstop"
)

// Box is one job's signals of kinds 1..last (S: the protocol's Signal).
// Init it before use.
type Box[S ~int] struct {
	mu       sync.Mutex
	pending  []bool        // by kind
	f        func(S)       // OnSignal's; nil: the channel
	out      chan S        // Channel's
	wake     chan struct{} // capacity 1: the forwarder looks again
	fwd      startstop.BaseStartStop
	closeOut sync.Once // closes out once
}

// Init makes b ready for the kinds 1..last.
func (b *Box[S]) Init(last S) {
	b.pending = make([]bool, last+1)
	b.out = make(chan S)
	b.wake = make(chan struct{}, 1)
}

// Emit marks s pending (coalesced); the watcher only.
func (b *Box[S]) Emit(s S) {
	b.mu.Lock()
	b.pending[s] = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// nextLocked returns the first pending signal, the lowest kind first; mu
// held.
func (b *Box[S]) nextLocked() (S, bool) {
	for s := range b.pending {
		if b.pending[s] {
			return S(s), true
		}
	}
	return 0, false
}

// SetFunc has Deliver call f with the signals, instead of the channel.
func (b *Box[S]) SetFunc(f func(S)) {
	b.mu.Lock()
	b.f = f
	b.mu.Unlock()
}

// Deliver calls SetFunc's f with the pending signals, if it is set. The
// watcher only (the end of a step).
func (b *Box[S]) Deliver() {
	b.mu.Lock()
	f := b.f
	var due []S
	if f != nil {
		for s, ok := b.nextLocked(); ok; s, ok = b.nextLocked() {
			b.pending[s] = false
			due = append(due, s)
		}
	}
	b.mu.Unlock()
	for _, s := range due {
		f(s)
	}
}

// Channel returns the signals' channel, starting its forwarder on the
// first call: a later call, or one after Close (the service stopped, the
// channel closed), starts nothing.
func (b *Box[S]) Channel() <-chan S {
	b.fwd.Go(context.Background(), b.forward)
	return b.out
}

// forward sends the pending signals on out, the lowest kind first, until
// ctx ends (Close). A kind stays pending until its send: emits meanwhile
// coalesce.
func (b *Box[S]) forward(ctx context.Context) {
	for {
		b.mu.Lock()
		s, ok := b.nextLocked()
		if b.f != nil {
			ok = false // SetFunc's f takes them
		}
		b.mu.Unlock()
		if !ok {
			select {
			case <-b.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case b.out <- s:
			b.mu.Lock()
			b.pending[s] = false
			b.mu.Unlock()
		case <-b.wake:
		case <-ctx.Done():
			return
		}
	}
}

// Close stops the forwarder, waiting for it, and closes the channel. Safe
// twice, and before any Channel call (no forwarder starts after it).
func (b *Box[S]) Close() {
	b.fwd.Stop()
	b.closeOut.Do(func() { close(b.out) })
}

package protocol

import (
	"context"
	"sync"

	"github.com/shardflow/shardflow/coord/protocol/internal/eventloop"
	"github.com/shardflow/shardflow/internal/startstop"
)

// signalBox holds a job's pending signals, each kind coalesced, and
// delivers them: to OnSignal's function at the end of the watcher's step,
// or on the Signals channel through a goroutine (fwd, a startstop service)
// that the first Signals call starts (a host of many jobs uses OnSignal and
// pays for none).
type signalBox struct {
	mu       sync.Mutex
	pending  [SignalResharded + 1]bool
	f        func(Signal) // OnSignal's; nil: the channel
	out      chan Signal
	wake     chan struct{} // capacity 1: the forwarder looks again
	fwd      startstop.BaseStartStop
	closeOut sync.Once // closes out once
}

func (b *signalBox) init() {
	b.out = make(chan Signal)
	b.wake = make(chan struct{}, 1)
}

// emit marks s pending (coalesced); watcher only.
func (b *signalBox) emit(s Signal) {
	b.mu.Lock()
	b.pending[s] = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// nextLocked returns the first pending signal; mu held.
func (b *signalBox) nextLocked() (Signal, bool) {
	for s := SignalConfigChanged; s <= SignalResharded; s++ {
		if b.pending[s] {
			return s, true
		}
	}
	return 0, false
}

// OnSignal delivers the job's signals by calling f instead of through
// Signals, so a host of many jobs needs no goroutine per job to receive
// them. f is called by the job's watcher, on a goroutine of the Registry's
// event loop (never two calls for one job at once), one signal at a time,
// for every kind coalesced as on Signals (pending ones at once); it must
// not block, nor call Leave or Registry.Close or wait for anything that
// does (start a goroutine for that): it would hold up other jobs' watchers.
// Call it once, right after Join; Signals then delivers nothing.
func (j *Job) OnSignal(f func(Signal)) {
	j.sig.mu.Lock()
	j.sig.f = f
	j.sig.mu.Unlock()
	j.q.Post(eventloop.Event{Kind: eventloop.Deliver}) // the watcher delivers what is pending
}

// deliver calls OnSignal's f with the pending signals, if it is set.
// Watcher only (the end of a step).
func (b *signalBox) deliver() {
	b.mu.Lock()
	f := b.f
	var due []Signal
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

// Signals returns the job's notification channel. Each kind of signal is
// coalesced (at most one pending); it is closed after Leave. The first call
// starts a goroutine (until Leave) that sends on it; a host of many jobs
// uses OnSignal instead.
func (j *Job) Signals() <-chan Signal {
	b := &j.sig
	// The forwarder runs once: a later call, or one after Leave (the
	// service stopped, the channel closed), starts nothing.
	b.fwd.Go(context.Background(), b.forward)
	return b.out
}

// forward sends the pending signals on out, the lowest kind first, until
// ctx ends (close). A kind stays pending until its send: emits meanwhile
// coalesce.
func (b *signalBox) forward(ctx context.Context) {
	for {
		b.mu.Lock()
		s, ok := b.nextLocked()
		if b.f != nil {
			ok = false // OnSignal's f takes them
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

// close stops the forwarder, waiting for it, and closes the channel
// (Leave, once the watcher has stopped). Safe twice, and before any
// Signals call (no forwarder starts after it).
func (b *signalBox) close() {
	b.fwd.Stop()
	b.closeOut.Do(func() { close(b.out) })
}

// Package startstop is the one start/stop helper of shardflow's services
// that own a goroutine, after river's startstop.BaseStartStop: Start runs
// once, Started is closed when it has, Stop is safe before Start and more
// than once, and Stop returns only after the service's goroutine has.
package startstop

import (
	"context"
	"sync"
)

// BaseStartStop is embedded by a service. Its zero value is ready to use.
//
// A service's Start calls StartInit; when it returns ok, the service starts
// its goroutine with the returned context (cancelled by Stop) and that
// goroutine calls the returned stopped func when it returns:
//
//	ctx, ok, stopped := s.StartInit(ctx)
//	if !ok {
//		return ErrStarted
//	}
//	go func() { defer stopped(); s.loop(ctx) }()
//
// All methods are safe for concurrent use.
type BaseStartStop struct {
	mu      sync.Mutex
	state   int // 0 new, 1 running, 2 stopped
	started chan struct{}
	done    chan struct{} // closed by stopped
	cancel  context.CancelFunc
}

const (
	stateNew = iota
	stateRunning
	stateStopped
)

func (s *BaseStartStop) initLocked() {
	if s.started == nil {
		s.started = make(chan struct{})
		s.done = make(chan struct{})
	}
}

// StartInit begins a Start. ok is false when the service was started or
// stopped before: a service runs once. Otherwise ctx is the service's
// context, derived from the one given and cancelled by Stop, and stopped
// must be called by the service's goroutine when it returns.
func (s *BaseStartStop) StartInit(ctx context.Context) (_ context.Context, ok bool, stopped func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.state != stateNew {
		return ctx, false, nil
	}
	s.state = stateRunning
	ctx, s.cancel = context.WithCancel(ctx)
	close(s.started)
	var once sync.Once
	return ctx, true, func() { once.Do(func() { close(s.done) }) }
}

// Started returns a channel closed once StartInit has succeeded.
func (s *BaseStartStop) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	return s.started
}

// Stop cancels the service's context and waits for its goroutine to
// return. Before Start it marks the service stopped (a later Start fails);
// a second Stop waits as the first does.
func (s *BaseStartStop) Stop() {
	s.mu.Lock()
	s.initLocked()
	was := s.state
	s.state = stateStopped
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if was == stateNew {
		return
	}
	cancel()
	<-done
}

// Running reports whether the service was started and not yet stopped.
func (s *BaseStartStop) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateRunning
}

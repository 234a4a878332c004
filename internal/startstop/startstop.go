// Package startstop is the one start/stop helper of shardflow's services
// (stats.Group, history.Buffer, jobs.Worker, dataflow.Node), after river's
// startstop.BaseStartStop: Start runs once, Started is closed when it has,
// Stop is safe before Start and more than once, and Stop returns only after
// the service's goroutine has.
package startstop

import (
	"context"
	"sync"
)

// BaseStartStop is embedded by a service (or held in an unexported field,
// to keep its methods out of the service's API). Its zero value is ready to
// use.
//
// A service's Start calls StartInit; when it returns ok, the service starts
// its goroutine with the returned context (cancelled by Stop), calls
// started, and that goroutine calls stopped when it returns:
//
//	ctx, ok, started, stopped := s.StartInit(ctx)
//	if !ok {
//		return ErrStarted
//	}
//	go func() { defer stopped(); s.loop(ctx) }()
//	started()
//
// Go does exactly that for a service of one goroutine.
//
// A service stops with one of Stop (cancel and wait), StopContext (the same,
// the wait bounded) or StopFunc (a stop of the service's own shape, such as
// a drain); it uses one of them, not a mix.
//
// All methods are safe for concurrent use.
type BaseStartStop struct {
	mu       sync.Mutex
	state    int
	ran      bool          // StopFunc's first call was made
	started  chan struct{} // closed by started
	done     chan struct{} // closed by stopped
	stopDone chan struct{} // closed when StopFunc's stop has returned
	cancel   context.CancelFunc
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
		s.stopDone = make(chan struct{})
	}
}

// StartInit begins a Start. ok is false when the service was started or
// stopped before: a service runs once (Running tells the two apart).
// Otherwise ctx is the service's context, derived from the one given and
// cancelled by Stop; the service calls started once it has started (Started
// is closed then), and its goroutine calls stopped when it returns. Both
// may be called more than once.
func (s *BaseStartStop) StartInit(ctx context.Context) (_ context.Context, ok bool, started, stopped func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.state != stateNew {
		return ctx, false, nil, nil
	}
	s.state = stateRunning
	ctx, s.cancel = context.WithCancel(ctx)
	startedCh, done := s.started, s.done
	var startOnce, stopOnce sync.Once
	return ctx, true,
		func() { startOnce.Do(func() { close(startedCh) }) },
		func() { stopOnce.Do(func() { close(done) }) }
}

// Go is StartInit for a service of one goroutine: it runs run on a new
// goroutine with the service's context, marks the service started, and
// returns true; or it returns false when the service was started or
// stopped before.
func (s *BaseStartStop) Go(ctx context.Context, run func(context.Context)) bool {
	ctx, ok, started, stopped := s.StartInit(ctx)
	if !ok {
		return false
	}
	go func() {
		defer stopped()
		run(ctx)
	}()
	started()
	return true
}

// Started returns a channel closed once the service has started (StartInit's
// started was called). It stays closed after Stop.
func (s *BaseStartStop) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	return s.started
}

// Running reports whether StartInit succeeded and no Stop has begun since.
func (s *BaseStartStop) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateRunning
}

// Stop cancels the service's context and waits for its goroutine to
// return. Before Start it marks the service stopped (a later Start fails);
// a second Stop waits as the first does.
func (s *BaseStartStop) Stop() { _ = s.StopContext(context.Background()) }

// StopContext is Stop with the wait bounded by ctx: when ctx ends first it
// returns ctx.Err(), and the goroutine, told to stop, returns on its own.
func (s *BaseStartStop) StopContext(ctx context.Context) error {
	cancel, done := s.markStopped()
	if cancel == nil {
		return nil // never started
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopFunc stops the service its own way, once: the first call marks the
// service stopped (a later Start fails) and runs stop, whose argument says
// whether the service had started; stop ends the service's goroutine (by
// Cancel, or by a signal of the service's own) and waits for it (Done).
// The service's context is cancelled after stop returns. Every other call
// waits for that first stop to return. first reports whether this call ran
// it.
func (s *BaseStartStop) StopFunc(stop func(started bool)) (first bool) {
	s.mu.Lock()
	cancel, _ := s.markStoppedLocked()
	first, s.ran = !s.ran, true
	stopDone := s.stopDone
	s.mu.Unlock()
	if !first {
		<-stopDone
		return false
	}
	defer close(stopDone)
	stop(cancel != nil)
	if cancel != nil {
		cancel()
	}
	return true
}

// Cancel cancels the service's context without waiting; for a StopFunc's
// stop. It does nothing before Start.
func (s *BaseStartStop) Cancel() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Done returns a channel closed once the service's goroutine has returned
// (StartInit's stopped was called); for a StopFunc's stop. It is never
// closed for a service that did not start.
func (s *BaseStartStop) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	return s.done
}

func (s *BaseStartStop) markStopped() (context.CancelFunc, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.markStoppedLocked()
}

// markStoppedLocked moves to stopped and returns the context's cancel (nil
// when the service never started) and the done channel.
func (s *BaseStartStop) markStoppedLocked() (context.CancelFunc, <-chan struct{}) {
	s.initLocked()
	s.state = stateStopped
	return s.cancel, s.done
}

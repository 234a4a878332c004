package startstop

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type svc struct {
	BaseStartStop
	ran chan struct{}
}

func newSvc() *svc { return &svc{ran: make(chan struct{})} }

func (s *svc) Start(ctx context.Context) bool {
	return s.Go(ctx, func(ctx context.Context) {
		close(s.ran)
		<-ctx.Done()
	})
}

func TestStartOnceStopWaits(t *testing.T) {
	s := newSvc()
	if s.Running() {
		t.Fatal("running before Start")
	}
	if !s.Start(t.Context()) {
		t.Fatal("first Start refused")
	}
	<-s.Started()
	<-s.ran
	if s.Start(t.Context()) {
		t.Fatal("second Start accepted")
	}
	if !s.Running() {
		t.Fatal("not running after Start")
	}
	s.Stop() // returns only after the goroutine (goleak checks)
	s.Stop()
	if s.Running() || s.Start(t.Context()) {
		t.Fatal("Start after Stop accepted")
	}
}

func TestStopBeforeStart(t *testing.T) {
	s := newSvc()
	s.Stop()
	if s.Start(t.Context()) {
		t.Fatal("Start after Stop accepted")
	}
	select {
	case <-s.Started():
		t.Fatal("Started closed without a Start")
	default:
	}
}

func TestParentContextEnds(t *testing.T) {
	s := newSvc()
	ctx, cancel := context.WithCancel(t.Context())
	s.Start(ctx)
	cancel()
	s.Stop() // the goroutine returned on ctx; Stop still waits for it
}

// A goroutine that ignores its context until released: StopContext returns
// ctx.Err() when ctx ends first, and nil once the goroutine has returned.
func TestStopContextBounded(t *testing.T) {
	var s BaseStartStop
	release := make(chan struct{})
	_, ok, started, stopped := s.StartInit(t.Context())
	if !ok {
		t.Fatal("StartInit refused")
	}
	go func() {
		defer stopped()
		<-release
	}()
	started()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.StopContext(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("StopContext with an ended ctx = %v, want context.Canceled", err)
	}
	close(release)
	if err := s.StopContext(t.Context()); err != nil {
		t.Fatalf("second StopContext = %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after StopContext returned nil")
	}
}

// StopFunc runs stop once, in the first call; a concurrent call returns
// only after that stop has, and the context is cancelled after it.
func TestStopFuncOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s BaseStartStop
		ctx, _, started, stopped := s.StartInit(t.Context())
		quit := make(chan struct{})
		go func() {
			defer stopped()
			<-quit // the service's own signal, not ctx
		}()
		started()

		inStop, release := make(chan struct{}), make(chan struct{})
		calls, sawStarted := 0, false
		first, second := make(chan bool, 1), make(chan bool, 1)
		go func() {
			first <- s.StopFunc(func(started bool) {
				calls++
				sawStarted = started
				close(inStop)
				<-release
				if ctx.Err() != nil {
					t.Error("context cancelled before stop returned")
				}
				close(quit)
				<-s.Done()
			})
		}()
		<-inStop
		if s.Running() {
			t.Fatal("running while stopping")
		}
		go func() { second <- s.StopFunc(func(bool) { calls++ }) }()
		synctest.Wait() // every goroutine blocked: the second call waits
		if len(second) != 0 {
			t.Fatal("second StopFunc returned before the first stop did")
		}
		close(release)
		if !<-first {
			t.Fatal("first StopFunc not first")
		}
		if <-second {
			t.Fatal("second StopFunc reported first")
		}
		if calls != 1 || !sawStarted {
			t.Fatalf("stop ran %d times, started=%v; want once, true", calls, sawStarted)
		}
		if ctx.Err() == nil {
			t.Fatal("context not cancelled after StopFunc")
		}
		if _, ok, _, _ := s.StartInit(t.Context()); ok {
			t.Fatal("StartInit after StopFunc accepted")
		}
	})
}

func TestStopFuncBeforeStart(t *testing.T) {
	var s BaseStartStop
	ran := false
	if !s.StopFunc(func(started bool) { ran = !started }) || !ran {
		t.Fatal("StopFunc before Start did not run stop with started=false")
	}
	if _, ok, _, _ := s.StartInit(t.Context()); ok {
		t.Fatal("StartInit after StopFunc accepted")
	}
	if s.Running() {
		t.Fatal("running after StopFunc")
	}
	s.Cancel() // nothing to cancel
}

package startstop

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type svc struct {
	BaseStartStop
	ran chan struct{}
}

func (s *svc) Start(ctx context.Context) bool {
	ctx, ok, stopped := s.StartInit(ctx)
	if !ok {
		return false
	}
	go func() {
		defer stopped()
		close(s.ran)
		<-ctx.Done()
	}()
	return true
}

func TestStartOnceStopWaits(t *testing.T) {
	s := &svc{ran: make(chan struct{})}
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
	s := &svc{ran: make(chan struct{})}
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
	s := &svc{ran: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	s.Start(ctx)
	cancel()
	s.Stop() // the goroutine returned on ctx; Stop still waits for it
}

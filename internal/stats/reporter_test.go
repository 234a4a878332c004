package stats

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSink records reports; fail makes the next writes fail.
type fakeSink struct {
	mu      sync.Mutex
	reports [][2]int64
	fail    int // number of upcoming writes that fail
	block   bool
}

var errSink = errors.New("sink down")

func (s *fakeSink) ReportCounts(ctx context.Context, success, failure int64) error {
	s.mu.Lock()
	block := s.block
	s.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return errSink
	}
	s.reports = append(s.reports, [2]int64{success, failure})
	return nil
}

func (s *fakeSink) got() [][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][2]int64(nil), s.reports...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func equalReports(a, b [][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The synctest bubble runs the reporter on a fake clock: time.Sleep moves
// it exactly, and synctest.Wait waits until the reporter is blocked again.
func TestReporterReportsEachInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{}
		r := NewReporter(&c, sink, 10*time.Second, quiet)
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Add(3, 1)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		c.Add(2, 0)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		time.Sleep(10 * time.Second) // an empty interval is reported as zeros
		synctest.Wait()
		c.Add(7, 7)
		if err := r.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		want := [][2]int64{{3, 1}, {2, 0}, {0, 0}, {7, 7}}
		if got := sink.got(); !equalReports(got, want) {
			t.Fatalf("reports = %v, want %v (last from Stop's flush)", got, want)
		}
	})
}

func TestReporterFailedWriteKeepsCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{fail: 2}
		r := NewReporter(&c, sink, time.Second, quiet)
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Add(1, 1)
		time.Sleep(time.Second) // fails
		synctest.Wait()
		c.Add(10, 0)
		time.Sleep(time.Second) // fails
		synctest.Wait()
		if got := sink.got(); len(got) != 0 {
			t.Fatalf("reports after failures = %v, want none", got)
		}
		time.Sleep(time.Second) // succeeds with everything kept
		synctest.Wait()
		if err := r.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// Nothing counted since: Stop writes no report of zeros.
		want := [][2]int64{{11, 1}}
		if got := sink.got(); !equalReports(got, want) {
			t.Fatalf("reports = %v, want %v", got, want)
		}
	})
}

func TestReporterStopFlushFailureRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{fail: 1}
		r := NewReporter(&c, sink, time.Hour, quiet)
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Add(4, 2)
		if err := r.Stop(context.Background()); !errors.Is(err, errSink) {
			t.Fatalf("Stop = %v, want the sink's error", err)
		}
		if s, f := c.Drain(); s != 4 || f != 2 {
			t.Fatalf("counts after failed final flush = %d, %d; want 4, 2 kept", s, f)
		}
	})
}

func TestReporterSetInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{}
		r := NewReporter(&c, sink, time.Hour, quiet)
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		r.SetInterval(5 * time.Second)
		if r.Interval() != 5*time.Second {
			t.Fatalf("Interval() = %v", r.Interval())
		}
		c.Add(1, 0)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := sink.got(); !equalReports(got, [][2]int64{{1, 0}}) {
			t.Fatalf("reports 5s after SetInterval(5s) = %v, want one", got)
		}
		r.SetInterval(0)
		if r.Interval() != DefaultInterval {
			t.Errorf("SetInterval(0) gave %v, want DefaultInterval", r.Interval())
		}
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReporterLifecycle(t *testing.T) {
	var c Counter
	sink := &fakeSink{}
	c.Add(1, 0)

	r := NewReporter(&c, sink, 0, nil)
	if r.Interval() != DefaultInterval {
		t.Errorf("interval 0 gave %v, want DefaultInterval", r.Interval())
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, ErrReporterStarted) {
		t.Fatalf("Start after Stop = %v, want ErrReporterStarted", err)
	}
	if got := sink.got(); len(got) != 0 {
		t.Fatalf("a never-started reporter reported %v", got)
	}

	r = NewReporter(&c, sink, time.Hour, quiet)
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, ErrReporterStarted) {
		t.Fatalf("second Start = %v, want ErrReporterStarted", err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if got := sink.got(); !equalReports(got, [][2]int64{{1, 0}}) {
		t.Fatalf("reports = %v, want the one final flush", got)
	}
}

// TestReporterStopBoundedByContext: a write hanging in the loop is
// cancelled when Stop's ctx ends, and Stop still waits for the goroutine.
func TestReporterStopBoundedByContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{block: true}
		r := NewReporter(&c, sink, time.Second, quiet)
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Add(2, 0)
		time.Sleep(time.Second) // the loop's write now hangs
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded", err)
		}
		if s, _ := c.Drain(); s != 2 {
			t.Fatalf("counts of the cancelled writes = %d, want 2 kept", s)
		}
	})
}

// TestReporterStartContextEnds: cancelling Start's ctx ends the loop;
// Stop still flushes.
func TestReporterStartContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &fakeSink{}
		ctx, cancel := context.WithCancel(context.Background())
		r := NewReporter(&c, sink, time.Second, quiet)
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait()
		c.Add(5, 0)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := sink.got(); len(got) != 0 {
			t.Fatalf("reports after Start's ctx ended = %v, want none", got)
		}
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := sink.got(); !equalReports(got, [][2]int64{{5, 0}}) {
			t.Fatalf("reports = %v, want the final flush", got)
		}
	})
}

// gatedSink blocks every write until gate is closed.
type gatedSink struct {
	fakeSink
	gate chan struct{}
}

func (s *gatedSink) ReportCounts(ctx context.Context, success, failure int64) error {
	<-s.gate
	return s.fakeSink.ReportCounts(ctx, success, failure)
}

// TestReporterStartedAndSecondStopWaits: Started is closed by Start, and a
// Stop beside the first waits for the first one's last report.
func TestReporterStartedAndSecondStopWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		sink := &gatedSink{gate: make(chan struct{})}
		r := NewReporter(&c, sink, time.Hour, quiet)
		select {
		case <-r.Started():
			t.Fatal("Started closed before Start")
		default:
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-r.Started()
		c.Add(4, 1)
		first, second := make(chan error, 1), make(chan error, 1)
		go func() { first <- r.Stop(context.Background()) }()
		synctest.Wait() // the first Stop's last report waits on the gate
		go func() { second <- r.Stop(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-second:
			t.Fatalf("second Stop returned %v before the first's last report", err)
		default:
		}
		close(sink.gate)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if got := sink.got(); !equalReports(got, [][2]int64{{4, 1}}) {
			t.Fatalf("reports = %v, want the one last report", got)
		}
	})
}

// TestReporterStoppedLeavesGroup: a Reporter put back on its Group after
// Stop (a SetInterval racing Stop does that) writes nothing and is taken
// off at its next tick, so a Group does not keep stopped Reporters.
func TestReporterStoppedLeavesGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(1)
		if err := g.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer g.Stop()
		var c Counter
		sink := &fakeSink{}
		r := NewReporter(&c, sink, time.Second, quiet)
		if err := r.StartIn(g); err != nil {
			t.Fatal(err)
		}
		c.Add(2, 1) // Stop's last report (none when nothing was counted)
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		g.schedule(r, time.Second) // what the racing SetInterval does
		c.Add(1, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		g.mu.Lock()
		left := g.heap.Len()
		g.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d Reporters left on the Group after a stopped one's tick, want 0", left)
		}
		if got := sink.got(); !equalReports(got, [][2]int64{{2, 1}}) {
			t.Fatalf("reports = %v, want only Stop's last one", got)
		}
	})
}

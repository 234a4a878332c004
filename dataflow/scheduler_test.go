package dataflow

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// runOnly is a job without coordination follow-ups: no catch-up runs
// flagged, nothing in the failover queue.
type runOnly func(ctx context.Context, reason Reason)

func (f runOnly) run(ctx context.Context, reason Reason, _ time.Time) { f(ctx, reason) }
func (runOnly) takeMisfire(context.Context) bool                      { return false }
func (runOnly) claimFailover(context.Context) bool                    { return false }

// startCancelOnlyRun adds job "j" to s, whose run ends only when its
// context is cancelled, triggers it and returns once the run has started,
// with a channel closed when the run has seen its context cancelled.
func startCancelOnlyRun(t *testing.T, s *scheduler) (canceled <-chan struct{}) {
	t.Helper()
	started, done := make(chan struct{}), make(chan struct{})
	if err := s.add("j", "", true, runOnly(func(ctx context.Context, _ Reason) {
		close(started)
		<-ctx.Done()
		close(done)
	})); err != nil {
		t.Fatal(err)
	}
	if err := s.trigger("j", ReasonTrigger); err != nil {
		t.Fatal(err)
	}
	<-started
	return done
}

// recorder is a job whose first run blocks until released. Its failover
// queue holds the items requestFailover put in.
type recorder struct {
	queue atomic.Int32
	// misfires is how many catch-up runs coord has flagged.
	misfires atomic.Int32
	mu       sync.Mutex
	reasons  []Reason
	started  chan struct{} // receives one value per run start
	release  chan struct{} // closed to let the first run end
	first    sync.Once
}

func newRecorder() *recorder {
	return &recorder{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (r *recorder) run(ctx context.Context, reason Reason, _ time.Time) {
	r.mu.Lock()
	r.reasons = append(r.reasons, reason)
	r.mu.Unlock()
	r.started <- struct{}{}
	blocked := false
	r.first.Do(func() { blocked = true })
	if blocked {
		select {
		case <-r.release:
		case <-ctx.Done():
		}
	}
}

func (r *recorder) takeMisfire(context.Context) bool { return take(&r.misfires) }

func (r *recorder) claimFailover(context.Context) bool { return take(&r.queue) }

// take decrements n if it is positive.
func take(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v == 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// requestFailover queues one failover item and signals it, as coord's
// SignalFailover does.
func (r *recorder) requestFailover(s *scheduler) {
	r.queue.Add(1)
	s.failover("j")
}

func (r *recorder) got() []Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reasons)
}

func testScheduler(t *testing.T) *scheduler {
	t.Helper()
	s := newScheduler(slog.Default())
	t.Cleanup(func() {
		if err := s.stop(context.Background(), true); err != nil {
			t.Errorf("hard stop: %v", err)
		}
	})
	return s
}

func waitIdle(t *testing.T, s *scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.wait(ctx); err != nil {
		t.Fatalf("scheduler did not go idle: %v", err)
	}
}

func TestSchedulerOverlap(t *testing.T) {
	tests := []struct {
		name     string
		misfire  bool
		fires    int // cron fires during the first run
		triggers int // manual triggers during the first run
		want     []Reason
	}{
		{"first missed fire counts", true, 1, 0, []Reason{ReasonCron, ReasonMisfire}},
		{"many missed fires collapse into one", true, 7, 0, []Reason{ReasonCron, ReasonMisfire}},
		{"misfire off drops fires", false, 3, 0, []Reason{ReasonCron}},
		{"manual trigger during a run is queued", false, 0, 1, []Reason{ReasonCron, ReasonTrigger}},
		{"triggers coalesce into one pending", true, 0, 3, []Reason{ReasonCron, ReasonTrigger}},
		{"trigger and misfire served by one run", true, 4, 2, []Reason{ReasonCron, ReasonTrigger}},
		{"no overlap, no extra run", true, 0, 0, []Reason{ReasonCron}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testScheduler(t)
			rec := newRecorder()
			if err := s.add("j", "", tt.misfire, rec); err != nil {
				t.Fatal(err)
			}
			j := s.jobs["j"]
			s.fire(time.Time{}, j) // the cron callback, called directly
			<-rec.started
			for range tt.fires {
				s.fire(time.Time{}, j)
			}
			for range tt.triggers {
				if err := s.trigger("j", ReasonTrigger); err != nil {
					t.Fatal(err)
				}
			}
			close(rec.release)
			waitIdle(t, s)
			if got := rec.got(); !slices.Equal(got, tt.want) {
				t.Fatalf("runs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSchedulerTriggerIdleRunsAtOnce(t *testing.T) {
	s := testScheduler(t)
	rec := newRecorder()
	close(rec.release)
	if err := s.add("j", "", true, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.trigger("j", ReasonTrigger); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if got := rec.got(); !slices.Equal(got, []Reason{ReasonTrigger}) {
		t.Fatalf("runs = %v", got)
	}
	if err := s.trigger("nope", ReasonTrigger); !errors.Is(err, ErrNoJob) {
		t.Fatalf("trigger unknown job: %v, want ErrNoJob", err)
	}
}

func TestSchedulerGracefulStopTimeoutCancelsRuns(t *testing.T) {
	s := newScheduler(slog.Default())
	s.start()
	canceled := startCancelOnlyRun(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.stop(ctx, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop = %v, want DeadlineExceeded", err)
	}
	select {
	case <-canceled: // the timed-out stop cancelled the run and waited for it
	default:
		t.Fatal("a timed-out graceful stop returned before the cancelled run ended")
	}
	if err := s.stop(t.Context(), true); err != nil {
		t.Fatalf("hard stop after a timed-out stop: %v", err)
	}
	if err := s.trigger("j", ReasonTrigger); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("trigger after stop: %v, want ErrNodeStopped", err)
	}
}

func TestSchedulerGracefulStopWaitsForRun(t *testing.T) {
	s := newScheduler(slog.Default())
	rec := newRecorder()
	if err := s.add("j", "", true, rec); err != nil {
		t.Fatal(err)
	}
	s.fire(time.Time{}, s.jobs["j"])
	<-rec.started
	s.fire(time.Time{}, s.jobs["j"]) // a pending misfire is dropped by stop
	stopped := make(chan error)
	go func() { stopped <- s.stop(t.Context(), false) }()
	select {
	case err := <-stopped:
		t.Fatalf("stop returned %v while the run was in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(rec.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if got := rec.got(); !slices.Equal(got, []Reason{ReasonCron}) {
		t.Fatalf("runs = %v, want only the first (no catch-up after stop)", got)
	}
}

func TestSchedulerHardStopCancels(t *testing.T) {
	s := newScheduler(slog.Default())
	canceled := startCancelOnlyRun(t, s)
	if err := s.stop(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-canceled:
	default:
		t.Fatal("a hard stop returned before the run observed cancellation")
	}
}

func TestSchedulerStopBeforeStartAndTwice(t *testing.T) {
	s := newScheduler(slog.Default())
	for range 2 {
		if err := s.stop(t.Context(), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.add("j", "", true, runOnly(func(context.Context, Reason) {})); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("add after stop: %v", err)
	}
	s.start() // starts no cron loop (goleak would see it)
	select {
	case <-s.life.Started():
		t.Fatal("start after stop started the scheduler")
	default:
	}
}

// The cron loop runs in a synctest bubble: its seconds pass on a fake clock,
// so the test neither waits for them nor depends on the machine's speed.
func TestSchedulerCronAddRemoveAtRuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := testScheduler(t)
		s.start()
		runs := make(chan Reason, 10)
		if err := s.add("every-second", "* * * * * ?", true, runOnly(func(_ context.Context, r Reason) { runs <- r })); err != nil {
			t.Fatal(err)
		}
		if next := s.nextFire("every-second", time.Now()); next.IsZero() || time.Until(next) > time.Second {
			t.Fatalf("nextFire = %v, want within a second", next)
		}
		select {
		case r := <-runs:
			if r != ReasonCron {
				t.Fatalf("reason %v, want cron", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("cron did not fire within 5s")
		}
		if err := s.remove(t.Context(), "every-second"); err != nil {
			t.Fatal(err)
		}
		if got := s.names(); len(got) != 0 {
			t.Fatalf("jobs after remove = %v", got)
		}
		drained := len(runs)
		// The schedule is gone: no fire in the next 1.5 s (one period and a half),
		// on the bubble's fake clock.
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if len(runs) != drained {
			t.Fatalf("job fired after remove")
		}
		if err := s.remove(t.Context(), "every-second"); !errors.Is(err, ErrNoJob) {
			t.Fatalf("second remove: %v, want ErrNoJob", err)
		}
	})
}

func TestSchedulerRemoveWaitsAndTimesOut(t *testing.T) {
	s := testScheduler(t)
	canceled := startCancelOnlyRun(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if err := s.remove(ctx, "j"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("remove = %v, want DeadlineExceeded", err)
	}
	<-canceled
	waitIdle(t, s)
}

func TestSchedulerBadCronAndReschedule(t *testing.T) {
	s := testScheduler(t)
	if err := s.add("bad", "not a cron", true, runOnly(func(context.Context, Reason) {})); !errors.Is(err, ErrBadCron) {
		t.Fatalf("add bad cron: %v, want ErrBadCron", err)
	}
	if err := s.add("j", "", true, runOnly(func(context.Context, Reason) {})); err != nil {
		t.Fatal(err)
	}
	if err := s.add("j", "", true, runOnly(func(context.Context, Reason) {})); !errors.Is(err, ErrJobExists) {
		t.Fatalf("duplicate add: %v, want ErrJobExists", err)
	}
	if !s.nextFire("j", time.Now()).IsZero() {
		t.Fatal("trigger-only job has a next fire time")
	}
	if err := s.reschedule("j", "0 15 10 ? * MON-FRI", true); err != nil {
		t.Fatal(err)
	}
	next := s.nextFire("j", time.Date(2026, 11, 20, 9, 0, 0, 0, time.Local)) // a Friday
	if want := time.Date(2026, 11, 20, 10, 15, 0, 0, time.Local); !next.Equal(want) {
		t.Fatalf("nextFire = %v, want %v", next, want)
	}
	if err := s.reschedule("j", "bogus", true); !errors.Is(err, ErrBadCron) {
		t.Fatalf("reschedule bad cron: %v", err)
	}
}

func TestSchedulerFailoverRequests(t *testing.T) {
	// A failover request during a run starts a failover runner beside it
	// (the run in progress stays blocked until the end of duringRun);
	// requests while that runner is busy make it claim once more.
	tests := []struct {
		name      string
		duringRun func(s *scheduler, j *schedJob, rec *recorder)
		want      []Reason
	}{
		{"failover during a run runs beside it", func(s *scheduler, _ *schedJob, rec *recorder) {
			rec.requestFailover(s)
			<-rec.started
		}, []Reason{ReasonCron, ReasonFailover}},
		{"requests while the failover runner is busy run it again", func(s *scheduler, _ *schedJob, rec *recorder) {
			rec.requestFailover(s)
			rec.requestFailover(s)
			<-rec.started
			<-rec.started
		}, []Reason{ReasonCron, ReasonFailover, ReasonFailover}},
		{"a queued trigger runs after the run", func(s *scheduler, _ *schedJob, rec *recorder) {
			rec.requestFailover(s)
			<-rec.started
			_ = s.trigger("j", ReasonTrigger)
		}, []Reason{ReasonCron, ReasonFailover, ReasonTrigger}},
		{"a catch-up run runs after the run", func(s *scheduler, j *schedJob, rec *recorder) {
			rec.requestFailover(s)
			<-rec.started
			s.fire(time.Time{}, j)
		}, []Reason{ReasonCron, ReasonFailover, ReasonMisfire}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testScheduler(t)
			rec := newRecorder()
			if err := s.add("j", "", true, rec); err != nil {
				t.Fatal(err)
			}
			j := s.jobs["j"]
			s.fire(time.Time{}, j)
			<-rec.started
			tt.duringRun(s, j, rec)
			close(rec.release)
			waitIdle(t, s)
			if got := rec.got(); !slices.Equal(got, tt.want) {
				t.Fatalf("runs = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("idle job runs a failover at once", func(t *testing.T) {
		s := testScheduler(t)
		rec := newRecorder()
		close(rec.release)
		if err := s.add("j", "", true, rec); err != nil {
			t.Fatal(err)
		}
		rec.requestFailover(s)
		waitIdle(t, s)
		if got := rec.got(); !slices.Equal(got, []Reason{ReasonFailover}) {
			t.Fatalf("runs = %v", got)
		}
	})
}

// TestSchedulerFollowUpOrder: after a run, followUp decides the next one
// in its documented order: the catch-up coord flagged, then a claimed
// failover item, then the queued trigger (which also serves the missed
// cron fires).
func TestSchedulerFollowUpOrder(t *testing.T) {
	s := testScheduler(t)
	rec := newRecorder()
	if err := s.add("j", "", true, rec); err != nil {
		t.Fatal(err)
	}
	j := s.jobs["j"]
	s.fire(time.Time{}, j)
	<-rec.started
	rec.misfires.Add(1)
	rec.queue.Add(1)
	s.fire(time.Time{}, j)
	if err := s.trigger("j", ReasonTrigger); err != nil {
		t.Fatal(err)
	}
	close(rec.release)
	waitIdle(t, s)
	want := []Reason{ReasonCron, ReasonMisfire, ReasonFailover, ReasonTrigger}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("runs = %v, want %v", got, want)
	}
}

// blockingRuns is a job whose every run blocks until release is closed;
// its failover queue holds the items put in.
type blockingRuns struct {
	queue   atomic.Int32
	started chan Reason // receives each run's reason as it starts
	release chan struct{}
}

func (b *blockingRuns) run(ctx context.Context, reason Reason, _ time.Time) {
	b.started <- reason
	select {
	case <-b.release:
	case <-ctx.Done():
	}
}

func (b *blockingRuns) takeMisfire(context.Context) bool { return false }

func (b *blockingRuns) claimFailover(context.Context) bool { return take(&b.queue) }

// A failover request while the run and the failover run beside it are both
// in progress claims and runs at once, on a runner of its own: the crashed
// server's next item must not wait for either run to end (the failover
// benchmark's busy survivors claimed a second item only when one of their
// runs ended, up to one run (1.5 s) late). In a synctest bubble.
func TestSchedulerFailoverBesideBusyFailoverRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := testScheduler(t)
		b := &blockingRuns{started: make(chan Reason, 10), release: make(chan struct{})}
		if err := s.add("j", "", true, b); err != nil {
			t.Fatal(err)
		}
		s.fire(time.Time{}, s.jobs["j"])
		for i, want := range []Reason{ReasonCron, ReasonFailover, ReasonFailover} {
			if i > 0 {
				b.queue.Add(1)
				s.failover("j")
			}
			synctest.Wait()
			select {
			case got := <-b.started:
				if got != want {
					t.Fatalf("run %d: %v, want %v", i+1, got, want)
				}
			default:
				t.Fatalf("run %d (%v) did not start while the runs before it were in progress", i+1, want)
			}
		}
		close(b.release)
		waitIdle(t, s)
		if n := b.queue.Load(); n != 0 {
			t.Fatalf("%d failover items left unclaimed", n)
		}
	})
}

// A kick (a workflow run's owed items, e.g. items a reshard moved here)
// that arrives while the job is in a run is not dropped: it runs right
// after that run. Dropped, it waited for the next reconcile tick (a
// minute), and TestWorkflowStepItemsMovedByReshardRunPromptly failed by
// chance when the reshard's kick met the run of the server's own item.
func TestSchedulerKickDuringRunFollowsIt(t *testing.T) {
	s := testScheduler(t)
	rec := newRecorder()
	if err := s.add("j", "", true, rec); err != nil {
		t.Fatal(err)
	}
	s.fire(time.Time{}, s.jobs["j"])
	<-rec.started
	s.kick("j")
	close(rec.release)
	waitIdle(t, s)
	if got, want := rec.got(), []Reason{ReasonCron, reasonKick}; !slices.Equal(got, want) {
		t.Fatalf("runs = %v, want %v (the kick after the run)", got, want)
	}
}

// Jobs on one cron spec share its parsed schedule (the cron loop computes
// its next fire time once for all of them); a spec in another time zone is
// another schedule, with its own fire times; a reschedule moves a job to
// its new spec's share, and a spec's share goes with its last job.
func TestSchedulerSharesSpecs(t *testing.T) {
	s := testScheduler(t)
	const utc, paris = "CRON_TZ=UTC 0 0 2 * * ?", "CRON_TZ=Europe/Paris 0 0 2 * * ?"
	noop := runOnly(func(context.Context, Reason) {})
	for _, j := range []struct{ name, spec string }{{"a", utc}, {"b", utc}, {"c", paris}} {
		if err := s.add(j.name, j.spec, true, noop); err != nil {
			t.Fatal(err)
		}
	}
	shares := func() map[string]int {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := map[string]int{}
		for spec, sh := range s.specs {
			m[spec] = sh.jobs
		}
		return m
	}
	if s.jobs["a"].sched != s.jobs["b"].sched || s.jobs["a"].sched == s.jobs["c"].sched {
		t.Fatal("jobs on one spec do not share its schedule, or jobs in two zones do")
	}
	if got := shares(); !maps.Equal(got, map[string]int{utc: 2, paris: 1}) {
		t.Fatalf("shares = %v", got)
	}
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	if a, c := s.nextFire("a", now), s.nextFire("c", now); !a.Equal(time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)) || !c.Equal(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("next fires: UTC job %v, Paris job %v; want 02:00 and 01:00 UTC", a, c)
	}
	if err := s.reschedule("b", paris, true); err != nil {
		t.Fatal(err)
	}
	if s.jobs["b"].sched != s.jobs["c"].sched {
		t.Fatal("a job rescheduled to a spec does not share it")
	}
	if err := s.remove(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := shares(); !maps.Equal(got, map[string]int{paris: 2}) {
		t.Fatalf("shares after moving b and removing a = %v, want only Paris's, with 2 jobs", got)
	}
	if err := s.reschedule("b", "", true); err != nil {
		t.Fatal(err)
	}
	if err := s.remove(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if got := shares(); len(got) != 0 {
		t.Fatalf("shares with only a trigger-only job left = %v, want none", got)
	}
}

package stats

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/shardflow/shardflow/internal/startstop"
)

// DefaultInterval is the report interval used when NewReporter or
// SetInterval gets a non-positive one: ElasticJob's default
// processCountIntervalSeconds, 300 seconds.
const DefaultInterval = 300 * time.Second

// ErrReporterStarted is returned by Start on a Reporter that was already
// started or stopped: a Reporter runs once.
var ErrReporterStarted = errors.New("stats: reporter already started or stopped; make a new Reporter with NewReporter")

// Sink receives the counts of one interval. protocol.Job implements it by
// writing servers/{id}/processSuccessCount and processFailureCount.
//
// ReportCounts is called from one goroutine at a time. It should honour ctx;
// when it returns an error the counts are kept and included in the next
// report, so a write that failed after taking effect would count twice.
type Sink interface {
	ReportCounts(ctx context.Context, success, failure int64) error
}

// Reporter writes a Counter's interval counts to a Sink every interval, as
// ElasticJob's ProcessCountStatistics job does. Nothing is lost: counts of a
// failed write are given back to the Counter for the next one, and Stop
// writes a last report.
//
// A Reporter runs on a Group: one goroutine ticking many Reporters (StartIn,
// what a Node with many jobs uses), or a Group of its own (Start).
//
// Lifecycle: NewReporter, Start or StartIn once, Stop. Stop is safe before
// Start and more than once (a later Stop waits for the first and returns
// nil). All methods are safe for concurrent use.
type Reporter struct {
	counter *Counter
	sink    Sink
	logger  *slog.Logger

	// writing is a lock held (a value sent) for every write, so writes
	// never overlap and Stop waits for an interval write in flight. A
	// channel rather than a mutex: waiting on it counts as blocked for
	// testing/synctest.
	writing chan struct{}

	// life is Start once and Stop once (StopFunc): the Reporter has no
	// goroutine of its own, its Group ticks it. Taken under mu, never the
	// other way round.
	life    startstop.BaseStartStop
	stopErr error // the first Stop's; read after life.StopFunc returns

	mu       sync.Mutex
	interval time.Duration
	group    *Group
	ownGroup bool               // Start made group; Stop stops it
	inflight context.CancelFunc // cancels the interval write in flight

	// Guarded by group.mu.
	due time.Time
	idx int // index in group.heap; -1 when not in it
}

// NewReporter returns a Reporter of counter's counts to sink every
// interval (DefaultInterval if interval <= 0), logging failed writes to
// logger (slog.Default() if nil). It starts nothing.
func NewReporter(counter *Counter, sink Sink, interval time.Duration, logger *slog.Logger) *Reporter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Reporter{counter: counter, sink: sink, logger: logger, interval: interval, idx: -1, writing: make(chan struct{}, 1)}
}

// Start starts reporting on a Group of the Reporter's own (one goroutine)
// and returns at once. Reporting ends when Stop is called or ctx ends;
// writes use a context derived from ctx. A second Start, or a Start after
// Stop, returns ErrReporterStarted.
func (r *Reporter) Start(ctx context.Context) error {
	g := NewGroup(1)
	if err := r.startIn(g, true); err != nil {
		return err
	}
	_ = g.Start(ctx)
	return nil
}

// StartIn starts reporting on g, which ticks many Reporters from one
// goroutine: the first report comes one interval from now (counted from
// g's Start if g is not started yet). It returns at once; Stop ends it.
// A second start, or one after Stop, returns ErrReporterStarted.
func (r *Reporter) StartIn(g *Group) error { return r.startIn(g, false) }

func (r *Reporter) startIn(g *Group, own bool) error {
	// Under mu, so that a Stop beside it finds the group set.
	r.mu.Lock()
	_, ok, started, _ := r.life.StartInit(context.Background())
	if !ok {
		r.mu.Unlock()
		return ErrReporterStarted
	}
	r.group, r.ownGroup = g, own
	iv := r.interval
	r.mu.Unlock()
	g.schedule(r, iv)
	started()
	return nil
}

// Started returns a channel closed once Start or StartIn has succeeded.
func (r *Reporter) Started() <-chan struct{} { return r.life.Started() }

// Stop ends the reporting, waits for an interval write in flight, and then
// writes one last report of the counts not yet reported, bounded by ctx;
// when there are none (no item processed since the last report), it
// writes nothing: stopping thousands of idle jobs would otherwise write a
// report of zeros for each (a few store round trips and a transaction
// apiece), and the last report written stays the server's. If
// ctx ends while an interval write is in flight, that write's context is
// cancelled and Stop still waits for it to return. Stop before Start marks
// the Reporter stopped and writes nothing; a later Stop waits for the first
// and returns nil. It returns the last write's error, or ctx's.
func (r *Reporter) Stop(ctx context.Context) error {
	if !r.life.StopFunc(func(started bool) { r.stopErr = r.stop(ctx, started) }) {
		return nil
	}
	return r.stopErr
}

// stop is the first Stop's work.
func (r *Reporter) stop(ctx context.Context, started bool) error {
	if !started {
		return nil
	}
	r.mu.Lock()
	g, own := r.group, r.ownGroup
	r.mu.Unlock()
	g.unschedule(r)
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		if r.inflight != nil {
			r.inflight()
		}
		r.mu.Unlock()
	})
	r.writing <- struct{}{} // the interval write in flight ends
	stop()
	<-r.writing
	if own {
		// Its writers waiting for the lock see the Reporter stopped
		// and return.
		g.Stop()
	}
	r.writing <- struct{}{}
	defer func() { <-r.writing }()
	if r.counter.pending() {
		return r.flush(ctx)
	}
	return nil
}

// SetInterval changes the report interval, for a live edit of
// processCountIntervalSeconds (DefaultInterval if d <= 0). The running
// interval is restarted: the next report comes d after the change.
func (r *Reporter) SetInterval(d time.Duration) {
	if d <= 0 {
		d = DefaultInterval
	}
	r.mu.Lock()
	r.interval = d
	g := r.group
	running := r.life.Running()
	r.mu.Unlock()
	if running {
		g.schedule(r, d)
	}
}

// Interval returns the current report interval.
func (r *Reporter) Interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interval
}

// intervalFlush is the Group's interval write; ctx is the Group's.
func (r *Reporter) intervalFlush(ctx context.Context) {
	r.writing <- struct{}{}
	defer func() { <-r.writing }()
	r.mu.Lock()
	if !r.life.Running() {
		g := r.group
		r.mu.Unlock()
		// Stop writes the last report. A SetInterval racing Stop may
		// have put r back on the Group: take it off again.
		g.unschedule(r)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.inflight = cancel
	r.mu.Unlock()
	_ = r.flush(ctx)
	r.mu.Lock()
	r.inflight = nil
	r.mu.Unlock()
}

// flush writes the counts drained from the counter; on failure it gives
// them back. Every interval is written, zero counts included, since the
// store's nodes hold the last interval's counts. The caller holds writing.
func (r *Reporter) flush(ctx context.Context) error {
	s, f := r.counter.Drain()
	if err := r.sink.ReportCounts(ctx, s, f); err != nil {
		r.counter.Restore(s, f)
		r.logger.Warn("stats: reporting processed item counts failed; they are kept for the next report",
			"success", s, "failure", f, "err", err)
		return err
	}
	return nil
}

package stats

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is the report interval used when NewReporter or
// SetInterval gets a non-positive one: ElasticJob's default
// processCountIntervalSeconds, 300 seconds.
const DefaultInterval = 300 * time.Second

// ErrReporterStarted is returned by Start on a Reporter that was already
// started or stopped: a Reporter runs once.
var ErrReporterStarted = errors.New("stats: reporter already started or stopped; make a new Reporter with NewReporter")

// Sink receives the counts of one interval. coord.Job implements it by
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
// Lifecycle: NewReporter, Start once, Stop. Stop is safe before Start and
// more than once. All methods are safe for concurrent use.
type Reporter struct {
	counter *Counter
	sink    Sink
	logger  *slog.Logger

	mu       sync.Mutex
	interval time.Duration
	started  bool
	stopped  bool
	stopCh   chan struct{} // closed by Stop to end the loop
	done     chan struct{} // closed by the loop when it has returned
	cancel   context.CancelFunc
	wake     chan struct{} // interval changed; capacity 1, coalesced
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
	return &Reporter{
		counter:  counter,
		sink:     sink,
		logger:   logger,
		interval: interval,
		stopCh:   make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}
}

// Start starts the reporting goroutine and returns at once. The goroutine
// runs until Stop is called or ctx ends; writes use a context derived from
// ctx. A second Start, or a Start after Stop, returns ErrReporterStarted.
func (r *Reporter) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return ErrReporterStarted
	}
	r.started = true
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go r.loop(runCtx)
	return nil
}

// Stop ends the reporting goroutine, waits for it, and then writes one last
// report of the counts not yet reported, bounded by ctx. If ctx ends while
// an interval write is in flight, that write's context is cancelled and
// Stop still waits for the goroutine to return. Stop before Start marks the
// Reporter stopped and writes nothing; a second Stop returns nil at once.
// It returns the last write's error, or ctx's.
func (r *Reporter) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	close(r.stopCh)
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel()
		<-r.done
	}
	r.cancel()
	return r.flush(ctx)
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
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Interval returns the current report interval.
func (r *Reporter) Interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interval
}

func (r *Reporter) loop(ctx context.Context) {
	defer close(r.done)
	timer := time.NewTimer(r.Interval())
	defer timer.Stop()
	for {
		select {
		case <-r.stopCh:
			return
		case <-ctx.Done():
			return
		case <-r.wake:
			timer.Reset(r.Interval())
		case <-timer.C:
			_ = r.flush(ctx)
			timer.Reset(r.Interval())
		}
	}
}

// flush writes the counts drained from the counter; on failure it gives
// them back. Every interval is written, zero counts included, since the
// store's nodes hold the last interval's counts.
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

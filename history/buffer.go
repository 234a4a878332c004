package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardflow/shardflow/internal/startstop"
)

// BufferConfig configures a Buffer. Zero fields take the stated defaults.
type BufferConfig struct {
	// Writer stores the batches. Required.
	Writer Writer
	// Size is the most records held while the Writer is slow or down;
	// records beyond it are dropped and counted. Default 10000.
	Size int
	// BatchSize is the most records per Write. Default 500.
	BatchSize int
	// FlushInterval is how long a record may wait for a batch to fill.
	// Default 1 s.
	FlushInterval time.Duration
	// WriteTimeout bounds one Write. Default 10 s.
	WriteTimeout time.Duration
	// MaxRetryInterval caps the wait between failed Writes, which doubles
	// from FlushInterval. Default 30 s.
	MaxRetryInterval time.Duration
	// LogInterval is the least time between two log lines about drops or
	// write errors. Default 1 min.
	LogInterval time.Duration
	// Logger receives those lines. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c BufferConfig) WithDefaults() BufferConfig {
	if c.Size <= 0 {
		c.Size = 10000
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxRetryInterval <= 0 {
		c.MaxRetryInterval = 30 * time.Second
	}
	if c.LogInterval <= 0 {
		c.LogInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrNoWriter is returned by NewBuffer without a Writer.
var ErrNoWriter = errors.New("history: BufferConfig.Writer is nil; pass a Writer such as pghistory.Store")

// ErrBufferStarted is returned by a second Start, or a Start after Stop: a
// Buffer runs once.
var ErrBufferStarted = errors.New("history: buffer already started or stopped; make a new Buffer with NewBuffer")

// Buffer is the Recorder to hand the Node: Record appends to a bounded
// queue and returns at once; one goroutine (from Start to Stop) writes the
// queue in batches through the Writer, in order, retrying a failed batch
// with a growing pause. Records that do not fit are dropped and counted.
// Records given before Start wait for it; records given after Stop are
// dropped. All methods are safe for concurrent use.
type Buffer struct {
	cfg BufferConfig

	mu      sync.Mutex
	queue   []Record
	stopped bool

	kick chan struct{} // a batch is full
	quit chan struct{} // closed by Stop: drain and return
	// life is the loop's; its context, cancelled when Stop's ctx ends,
	// ends the loop's writes.
	life    startstop.BaseStartStop
	stopErr error // the first Stop's; read after life.StopFunc returns

	written, dropped, writeErrors atomic.Uint64
}

// NewBuffer returns a Buffer for cfg; it starts no goroutine.
func NewBuffer(cfg BufferConfig) (*Buffer, error) {
	if cfg.Writer == nil {
		return nil, ErrNoWriter
	}
	cfg = cfg.WithDefaults()
	return &Buffer{cfg: cfg, kick: make(chan struct{}, 1), quit: make(chan struct{})}, nil
}

// Record queues recs; what does not fit is dropped and counted. It never
// blocks on the Writer.
func (b *Buffer) Record(recs ...Record) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		b.dropped.Add(uint64(len(recs)))
		return
	}
	room := max(0, b.cfg.Size-len(b.queue))
	keep := min(room, len(recs))
	b.queue = append(b.queue, recs[:keep]...)
	full := len(b.queue) >= b.cfg.BatchSize
	b.mu.Unlock()
	if keep < len(recs) {
		b.dropped.Add(uint64(len(recs) - keep))
	}
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// Start starts the writing goroutine. ctx is not retained. A second Start,
// or one after Stop, returns ErrBufferStarted.
func (b *Buffer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !b.life.Go(context.Background(), b.loop) {
		return ErrBufferStarted
	}
	return nil
}

// Stop stops taking records, writes what is queued (bounded by ctx: what is
// left when ctx ends is dropped and counted, and ctx.Err() returned) and
// waits for the goroutine. A failing Writer is tried once more, not
// retried. Safe before Start and more than once (later calls return the
// first one's result).
func (b *Buffer) Stop(ctx context.Context) error {
	b.life.StopFunc(func(started bool) {
		b.mu.Lock()
		b.stopped = true
		left := 0
		if !started {
			left = len(b.queue)
			b.queue = nil
		}
		b.mu.Unlock()
		if !started {
			b.dropped.Add(uint64(left))
			return
		}
		stopCancel := context.AfterFunc(ctx, b.life.Cancel)
		close(b.quit)
		<-b.life.Done()
		stopCancel()
		b.stopErr = ctx.Err()
	})
	return b.stopErr
}

// BufferStats are a Buffer's counts since NewBuffer.
type BufferStats struct {
	// Queued is the number of records waiting to be written.
	Queued int
	// Written, Dropped and WriteErrors count records stored, records
	// dropped (full buffer, or left at Stop) and failed Writes.
	Written, Dropped, WriteErrors uint64
}

// Stats returns the Buffer's counts.
func (b *Buffer) Stats() BufferStats {
	b.mu.Lock()
	q := len(b.queue)
	b.mu.Unlock()
	return BufferStats{Queued: q, Written: b.written.Load(), Dropped: b.dropped.Load(), WriteErrors: b.writeErrors.Load()}
}

// loop writes batches until Stop. It owns the timer.
func (b *Buffer) loop(ctx context.Context) {
	// Separate limits: a write error line must not hide the drops.
	errLog, lg := &logLimiter{every: b.cfg.LogInterval}, &logLimiter{every: b.cfg.LogInterval}
	wait := b.cfg.FlushInterval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		retrying := wait > b.cfg.FlushInterval
		select {
		case <-b.quit:
			b.drain(ctx, lg)
			return
		case <-b.kick:
			if retrying {
				continue // a full batch does not cut a retry pause short
			}
		case <-timer.C:
		}
		if err := b.flush(ctx); err != nil {
			b.writeErrors.Add(1)
			errLog.log(b.cfg.Logger, "history: writing records failed; retrying, dropping what does not fit",
				"err", err, "queued", b.Stats().Queued)
			wait = min(2*wait, b.cfg.MaxRetryInterval)
		} else {
			wait = b.cfg.FlushInterval
		}
		b.logDrops(lg)
		timer.Reset(wait)
	}
}

// flush writes the queue in batches until it is empty or a Write fails.
func (b *Buffer) flush(ctx context.Context) error {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.cfg.BatchSize)
		batch := b.queue[:n:n]
		b.mu.Unlock()
		if n == 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, b.cfg.WriteTimeout)
		err := b.cfg.Writer.Write(wctx, batch)
		cancel()
		if err != nil {
			return err
		}
		b.written.Add(uint64(n))
		b.mu.Lock()
		// Record only appends, so the batch is still the queue's head.
		b.queue = b.queue[n:]
		if len(b.queue) == 0 {
			b.queue = nil // let the backing array go
		}
		b.mu.Unlock()
	}
}

// drain is the last flush, at Stop: what cannot be written is dropped.
func (b *Buffer) drain(ctx context.Context, lg *logLimiter) {
	err := b.flush(ctx)
	b.mu.Lock()
	left := len(b.queue)
	b.queue = nil
	b.mu.Unlock()
	if err != nil {
		b.writeErrors.Add(1)
	}
	if left > 0 {
		b.dropped.Add(uint64(left))
		b.cfg.Logger.Warn("history: records dropped at stop", "dropped", left, "err", err)
	}
	lg.last = time.Time{}
	b.logDrops(lg)
}

// logDrops logs new drops, at most once per LogInterval.
func (b *Buffer) logDrops(lg *logLimiter) {
	d := b.dropped.Load()
	if d == lg.droppedLogged {
		return
	}
	if lg.log(b.cfg.Logger, "history: records dropped (buffer full or stopped)",
		"dropped", d-lg.droppedLogged, "dropped_total", d, "size", b.cfg.Size) {
		lg.droppedLogged = d
	}
}

// logLimiter lets one line through per interval.
type logLimiter struct {
	every         time.Duration
	last          time.Time
	droppedLogged uint64
}

func (l *logLimiter) log(lg *slog.Logger, msg string, args ...any) bool {
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		return false
	}
	l.last = now
	lg.Warn(msg, args...)
	return true
}

var _ Recorder = (*Buffer)(nil)

// String describes the Buffer's state for logs.
func (s BufferStats) String() string {
	return fmt.Sprintf("queued %d, written %d, dropped %d, write errors %d", s.Queued, s.Written, s.Dropped, s.WriteErrors)
}

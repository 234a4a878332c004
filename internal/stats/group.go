package stats

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/shardflow/shardflow/internal/startstop"
	"github.com/shardflow/shardflow/internal/timeheap"
)

// ErrGroupStarted is returned by Group.Start on a Group that was already
// started or stopped: a Group runs once.
var ErrGroupStarted = errors.New("stats: group already started or stopped; make a new Group with NewGroup")

// Group ticks many Reporters from one goroutine: a timer heap ordered by
// each Reporter's next report, so a process with thousands of jobs has one
// reporting goroutine, not one per job. Due writes run on at most limit
// goroutines at once, which exist only while writing.
//
// Lifecycle: NewGroup, StartIn (any time), Start, Stop. Stop is safe
// before Start and more than once. All methods are safe for concurrent use.
type Group struct {
	startstop.BaseStartStop
	limit int

	mu   sync.Mutex
	heap *timeheap.Heap[*Reporter] // by due time
	wake chan struct{}             // the earliest due time changed; capacity 1
}

// NewGroup returns a Group writing at most limit reports at once (1 if
// limit < 1). It starts nothing.
func NewGroup(limit int) *Group {
	return &Group{
		limit: max(limit, 1),
		wake:  make(chan struct{}, 1),
		heap:  timeheap.New(func(r *Reporter) time.Time { return r.due }, func(r *Reporter, i int) { r.idx = i }),
	}
}

// Start starts the Group's goroutine and returns at once. It runs until
// Stop is called or ctx ends; writes use a context derived from ctx. A
// second Start, or one after Stop, returns ErrGroupStarted.
func (g *Group) Start(ctx context.Context) error {
	if !g.Go(ctx, g.loop) {
		return ErrGroupStarted
	}
	return nil
}

// Stop ends the Group's goroutine and waits for it and for the interval
// writes in flight (their context is cancelled). The Reporters keep their
// counts; their own Stop writes the last report.
func (g *Group) Stop() { g.BaseStartStop.Stop() }

// schedule (re)schedules r's next report d from now.
func (g *Group) schedule(r *Reporter, d time.Duration) {
	g.mu.Lock()
	r.due = time.Now().Add(d)
	if r.idx >= 0 {
		g.heap.Fix(r.idx)
	} else {
		g.heap.Push(r)
	}
	first := g.heap.Min() == r
	g.mu.Unlock()
	if first {
		g.kick()
	}
}

// unschedule removes r; it reports no more intervals.
func (g *Group) unschedule(r *Reporter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.idx >= 0 {
		g.heap.Remove(r.idx)
	}
}

func (g *Group) kick() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// takeDue pops the Reporters due at now and schedules each one's next
// report an interval later.
func (g *Group) takeDue(now time.Time) []*Reporter {
	g.mu.Lock()
	defer g.mu.Unlock()
	var due []*Reporter
	for g.heap.Len() > 0 && !g.heap.Min().due.After(now) {
		r := g.heap.Min()
		due = append(due, r)
		r.due = now.Add(r.Interval())
		g.heap.Fix(0)
	}
	return due
}

func (g *Group) loop(ctx context.Context) {
	var writers sync.WaitGroup
	defer writers.Wait()
	slots := make(chan struct{}, g.limit)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		g.mu.Lock()
		var next time.Time
		if g.heap.Len() > 0 {
			next = g.heap.Min().due
		}
		g.mu.Unlock()
		var tick <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
			timer.Stop()
			continue
		case <-tick:
		}
		for _, r := range g.takeDue(time.Now()) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			writers.Add(1)
			go func() {
				defer writers.Done()
				defer func() { <-slots }()
				r.intervalFlush(ctx)
			}()
		}
	}
}

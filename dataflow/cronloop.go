package dataflow

import (
	"context"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shardflow/shardflow/internal/startstop"
	"github.com/shardflow/shardflow/internal/timeheap"
)

// cronLoop fires the cron schedules of a Node's jobs from one goroutine and
// one timer. Its entries are a min-heap by next fire time, so adding or
// removing one of n jobs costs O(log n). robfig/cron's Cron, which it
// replaces (its Schedule interface and parsers stay), sorts all of its
// entries again on every add, removal and fire: a Node adding 10,000 jobs
// spent 16% of its CPU in that sort (docs/benchmarks.md, issue 15 item 1).
//
// As robfig/cron's Cron does, a fire at time t computes the entry's next
// fire time from t (fires missed while the process slept are not made up),
// an entry added while running is due at its schedule's next time after
// the add, and entries added before start count from start. Fire functions
// run on the loop's goroutine, one at a time, and must not block: the
// scheduler's take its mutex briefly. A schedule whose Next is zero never
// fires again.
//
// All methods are safe for concurrent use.
type cronLoop struct {
	mu      sync.Mutex
	entries *timeheap.Heap[*cronEntry] // by next fire time
	pending []*cronEntry               // added before start
	started bool
	stopped bool

	wake chan struct{} // capacity 1: the earliest fire time changed
	life startstop.BaseStartStop
}

// cronEntry is one scheduled job.
type cronEntry struct {
	sched cron.Schedule
	fire  func()
	next  time.Time
	index int // in the heap; -1 when not in it
}

func newCronLoop() *cronLoop {
	return &cronLoop{
		entries: timeheap.New(func(e *cronEntry) time.Time { return e.next }, func(e *cronEntry, i int) { e.index = i }),
		wake:    make(chan struct{}, 1),
	}
}

// add schedules fire on sched and returns the entry, for remove.
func (c *cronLoop) add(sched cron.Schedule, fire func()) *cronEntry {
	e := &cronEntry{sched: sched, fire: fire, index: -1}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
	case !c.started:
		c.pending = append(c.pending, e)
	default:
		if c.pushLocked(e, time.Now()) && e.index == 0 {
			c.wakeLoop()
		}
	}
	return e
}

// remove unschedules e; it never fires after remove returns, unless its
// fire is running on the loop at that moment.
func (c *cronLoop) remove(e *cronEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.index >= 0 {
		c.entries.Remove(e.index)
		return
	}
	for i, p := range c.pending {
		if p == e {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return
		}
	}
}

// start starts the loop's goroutine; entries added so far count from now.
// A second start, or one after stop, does nothing.
func (c *cronLoop) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.stopped {
		return
	}
	c.started = true
	now := time.Now()
	for _, e := range c.pending {
		c.pushLocked(e, now)
	}
	c.pending = nil
	c.life.Go(context.Background(), c.run)
}

// stop ends the loop and waits for its goroutine, so for a fire in
// progress. No entry fires afterwards. Safe more than once and before
// start.
func (c *cronLoop) stop() {
	c.mu.Lock()
	c.stopped = true
	c.entries.Clear()
	c.pending = nil
	c.mu.Unlock()
	c.life.Stop()
}

// pushLocked schedules e at its next fire time after now; false when it
// has none.
func (c *cronLoop) pushLocked(e *cronEntry, now time.Time) bool {
	e.next = e.sched.Next(now)
	if e.next.IsZero() {
		return false
	}
	c.entries.Push(e)
	return true
}

func (c *cronLoop) wakeLoop() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run fires the entries as they come due until ctx ends (stop).
func (c *cronLoop) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []func()
	for {
		c.mu.Lock()
		now := time.Now()
		due = due[:0]
		for c.entries.Len() > 0 && !c.entries.Min().next.After(now) {
			e := c.entries.Min()
			due = append(due, e.fire)
			if e.next = e.sched.Next(now); e.next.IsZero() {
				c.entries.Remove(0)
			} else {
				c.entries.Fix(0)
			}
		}
		wait := time.Duration(-1)
		if c.entries.Len() > 0 {
			wait = c.entries.Min().next.Sub(now)
		}
		c.mu.Unlock()
		if len(due) > 0 {
			for _, f := range due {
				f()
			}
			continue // the wait counts from after the fires
		}
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-c.wake:
		case <-ctx.Done():
			return
		}
	}
}

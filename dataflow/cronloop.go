package dataflow

import (
	"context"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shardflow/shardflow/coord/jobconfig/quartz"
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
// The entries due at one instant are handed to fire together, in one
// call, so that the scheduler starts thousands of runs due together under
// one lock rather than one each; entries that share a cronSchedule (the
// scheduler gives jobs with the same spec the same one) have their next
// fire time computed once per instant, not once each (a Quartz Next is
// microseconds: 10,000 jobs on one cron spent tens of milliseconds in it
// before the first of them fired).
//
// As robfig/cron's Cron does, a fire at time t computes the entry's next
// fire time from t (fires missed while the process slept are not made up),
// an entry added while running is due at its schedule's next time after
// the add, and entries added before start count from start. fire runs on
// the loop's goroutine and must not block: the scheduler's takes its
// mutex briefly. A schedule whose Next is zero never fires again.
//
// All methods are safe for concurrent use.
type cronLoop[T any] struct {
	mu      sync.Mutex
	entries *timeheap.Heap[*cronEntry[T]] // by next fire time
	pending []*cronEntry[T]               // added before start
	started bool
	stopped bool
	fire    func(at time.Time, due []T)

	wake chan struct{} // capacity 1: the earliest fire time changed
	life startstop.BaseStartStop
}

// cronSchedule is a schedule that entries may share. at and next memoize
// the last Next the loop computed: Next(at) = next. Under cronLoop.mu.
type cronSchedule struct {
	cron.Schedule
	at, next time.Time
	// fixedTimes: Next(t) is the first of a fixed set of fire times after
	// t (a cron spec's, Quartz's or robfig's; not "@every", whose times
	// count from t), so Next(t) = next for every t in [at, next).
	fixedTimes bool
}

// newCronSchedule shares parsed among the entries given it.
func newCronSchedule(parsed cron.Schedule) *cronSchedule {
	s := &cronSchedule{Schedule: parsed}
	switch parsed.(type) {
	case *quartz.Schedule, *cron.SpecSchedule:
		s.fixedTimes = true
	}
	return s
}

// nextLocked is s.Next(now), computed once for every entry due at now.
func (s *cronSchedule) nextLocked(now time.Time) time.Time {
	if s.at.IsZero() || !s.at.Equal(now) {
		s.at, s.next = now, s.Next(now)
	}
	return s.next
}

// cronEntry is one scheduled job.
type cronEntry[T any] struct {
	sched *cronSchedule
	v     T
	next  time.Time
	index int // in the heap; -1 when not in it
}

// nextAfter is s.Next(now) for a schedule of the loop's entries. A run
// asks it for the fire after its own, which the loop has nearly always
// computed already (a Quartz Next is microseconds: 7% of an unmonitored
// run's CPU, BenchmarkFireTick).
func (c *cronLoop[T]) nextAfter(s *cronSchedule, now time.Time) time.Time {
	c.mu.Lock()
	at, next := s.at, s.next
	c.mu.Unlock()
	if s.fixedTimes && !at.IsZero() && !now.Before(at) && now.Before(next) {
		return next
	}
	return s.Next(now)
}

// newCronLoop returns a loop that calls fire with the values of the
// entries due at each instant, and that instant (their schedules' fire
// time, not the time the loop got to them).
func newCronLoop[T any](fire func(at time.Time, due []T)) *cronLoop[T] {
	return &cronLoop[T]{
		entries: timeheap.New(func(e *cronEntry[T]) time.Time { return e.next }, func(e *cronEntry[T], i int) { e.index = i }),
		wake:    make(chan struct{}, 1),
		fire:    fire,
	}
}

// add schedules v on sched and returns the entry, for remove.
func (c *cronLoop[T]) add(sched *cronSchedule, v T) *cronEntry[T] {
	e := &cronEntry[T]{sched: sched, v: v, index: -1}
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

// remove unschedules e; it never fires after remove returns, unless it is
// among the entries being fired at that moment.
func (c *cronLoop[T]) remove(e *cronEntry[T]) {
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
func (c *cronLoop[T]) start() {
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
func (c *cronLoop[T]) stop() {
	c.mu.Lock()
	c.stopped = true
	c.entries.Clear()
	c.pending = nil
	c.mu.Unlock()
	c.life.Stop()
}

// pushLocked schedules e at its next fire time after now; false when it
// has none.
func (c *cronLoop[T]) pushLocked(e *cronEntry[T], now time.Time) bool {
	e.next = e.sched.nextLocked(now)
	if e.next.IsZero() {
		return false
	}
	c.entries.Push(e)
	return true
}

func (c *cronLoop[T]) wakeLoop() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run fires the entries as they come due until ctx ends (stop).
func (c *cronLoop[T]) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		due []T
		ats []time.Time // ats[i]: due[i]'s fire time
	)
	for {
		c.mu.Lock()
		now := time.Now()
		clear(due) // no reference kept to the values fired last
		due, ats = due[:0], ats[:0]
		for c.entries.Len() > 0 && !c.entries.Min().next.After(now) {
			e := c.entries.Min()
			due, ats = append(due, e.v), append(ats, e.next)
			if e.next = e.sched.nextLocked(now); e.next.IsZero() {
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
			// In fire time order (the heap's): one call per instant.
			for i := 0; i < len(due); {
				k := i + 1
				for k < len(due) && ats[k].Equal(ats[i]) {
					k++
				}
				c.fire(ats[i], due[i:k])
				i = k
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

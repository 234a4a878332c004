package dataflow

import (
	"sync"
	"time"
)

// runStarts are the runners due to start, oldest first, and the starter
// goroutines that run them (scheduler.starter).
//
// A runner does not get a goroutine of its own: a starter that has run
// one takes the next one queued, on a stack already grown to a run's
// depth. When thousands of runs are due at one instant (the jobs of a
// cron that fire together), a few starters run them one after another,
// where one goroutine each grew a new stack each time (10% of the CPU of
// 1,000 runs at once, BenchmarkFireTick) and put every one of them in the
// garbage collector's scan.
//
// No run waits for another's end: while runners are queued, a starter
// that has not yet taken one is on its way to a processor (unstarted >= 1),
// and each starter, when it takes a runner and leaves more queued, starts
// the next one before its run. A starter blocked in a long run holds only
// that run: the runners queued behind it go to the starters it and the
// others started, one after another, each as soon as the Go scheduler
// runs it (blocked runs: the whole queue within microseconds a runner; a
// tick of 10,000 due at once used to start 10,000 goroutines, which took
// 5% of the CPU).
type runStarts struct {
	mu    sync.Mutex
	queue []runStart // queue[head:] are queued
	head  int
	// unstarted: starters started that have not yet taken their first
	// runner; at least 1 while runners are queued.
	unstarted int
	// goroutines are the starters: the scheduler's stop waits for them
	// once no runner is left.
	goroutines sync.WaitGroup
}

// runStart is a runner due to start: its job's run for reason, serving
// the cron fire time scheduled (zero but for ReasonCron).
type runStart struct {
	j         *schedJob
	reason    Reason
	scheduled time.Time
}

// push queues rs and reports whether the caller must start a starter
// (then counted as unstarted): when none is on its way.
func (q *runStarts) push(rs runStart) (start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, rs)
	return q.needStarterLocked()
}

// needStarterLocked counts a starter to start when runners are queued and
// no unstarted starter would take them.
func (q *runStarts) needStarterLocked() bool {
	if q.unstarted > 0 || q.head == len(q.queue) {
		return false
	}
	q.unstarted++
	return true
}

// take returns the oldest runner queued, false when none is; first says
// it is the starter's first take. start: the caller must start a starter
// for the runners left queued (then counted as unstarted).
func (q *runStarts) take(first bool) (rs runStart, ok, start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if first {
		q.unstarted--
	}
	if q.head == len(q.queue) {
		return runStart{}, false, false
	}
	rs = q.queue[q.head]
	q.queue[q.head] = runStart{} // no reference kept to the job
	q.head++
	switch {
	case q.head == len(q.queue):
		q.queue, q.head = q.queue[:0], 0
	case q.head >= 64 && 2*q.head >= len(q.queue):
		// Never emptied (a steady stream of runners): drop the taken
		// half, so that the slice does not grow without bound.
		n := copy(q.queue, q.queue[q.head:])
		clear(q.queue[n:])
		q.queue, q.head = q.queue[:n], 0
	}
	return rs, true, q.needStarterLocked()
}

// Package stats counts the outcomes of processed items per job, reports the
// last interval's counts to the coordination store (as ElasticJob's
// processSuccessCount and processFailureCount), and exposes them, with run
// durations, to Prometheus.
package stats

import "sync/atomic"

// Counter counts successful and failed items of one job. It keeps running
// totals (Snapshot) and interval counts that Drain takes and resets. The
// zero value is ready to use. All methods are safe for concurrent use and
// lock-free; Add is a few atomic adds, cheap enough to call per item.
//
// A Counter must not be copied after first use.
type Counter struct {
	_ noCopy
	// Interval counts first: they are what Add and Drain contend on.
	success, failure           atomic.Int64
	totalSuccess, totalFailure atomic.Int64
}

// noCopy lets go vet's copylocks check flag copies of a Counter.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Add counts success successful and failure failed items. Negative values
// are not meant to be passed; they would be subtracted.
func (c *Counter) Add(success, failure int64) {
	if success != 0 {
		c.success.Add(success)
		c.totalSuccess.Add(success)
	}
	if failure != 0 {
		c.failure.Add(failure)
		c.totalFailure.Add(failure)
	}
}

// Snapshot returns the totals counted since the Counter was made. The two
// numbers are read one after the other, not as one atomic pair.
func (c *Counter) Snapshot() (success, failure int64) {
	return c.totalSuccess.Load(), c.totalFailure.Load()
}

// Drain returns the counts added since the previous Drain and resets them,
// atomically per number: a concurrent Add lands in this interval or the next,
// never in neither. Totals are not affected.
func (c *Counter) Drain() (success, failure int64) {
	return c.success.Swap(0), c.failure.Swap(0)
}

// pending reports whether counts were added since the last Drain.
func (c *Counter) pending() bool { return c.success.Load() != 0 || c.failure.Load() != 0 }

// Restore gives back counts taken by Drain that could not be reported, so
// the next Drain includes them. Totals are not affected.
func (c *Counter) Restore(success, failure int64) {
	if success != 0 {
		c.success.Add(success)
	}
	if failure != 0 {
		c.failure.Add(failure)
	}
}

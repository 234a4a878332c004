package dataflow

import (
	"context"
	"sync"
	"time"
)

// completeContexts hands out the contexts that bound runs' completions
// (the workflow record and Run.Complete): one per second, shared by the
// runs that complete in it, whose deadline is completeTimeout after that
// second ends (so each run gets completeTimeout to 1 s more). A context
// with a timeout of its own per run was a timer started and stopped and
// five allocations: 5-8% of an unmonitored run's CPU, whose Complete sends
// nothing. A run's own context carries no values for its completion to
// keep (the scheduler's contexts descend from Background), and none of
// these is ever cancelled early: each ends at its deadline, when its timer
// lets it go.
type completeContexts struct {
	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc // kept only to satisfy the context's contract; never called early
	deadline time.Time
}

// at returns the shared context for a completion starting at now.
func (c *completeContexts) at(now time.Time) context.Context {
	deadline := now.Truncate(time.Second).Add(time.Second + completeTimeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil || !c.deadline.Equal(deadline) {
		c.ctx, c.cancel = context.WithDeadline(context.Background(), deadline)
		c.deadline = deadline
	}
	return c.ctx
}

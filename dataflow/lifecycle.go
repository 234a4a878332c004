package dataflow

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
)

// Start starts the scheduler and the jobs' count reporters and returns at
// once; Started is closed. When ctx ends (a signal.NotifyContext, say),
// the Node begins a graceful stop, as Stop does; call Stop or
// StopAndCancel after it to bound that stop or to cancel the runs, and
// Stopped to wait for its end. A second Start is a no-op; Start after a
// stop has begun returns ErrNodeStopped.
func (n *Node) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping {
		return ErrNodeStopped
	}
	_, ok, started, _ := n.life.StartInit(context.Background())
	if !ok {
		return nil // started before: a stopping Node was refused above
	}
	if err := n.reports.Start(n.ctx); err != nil {
		n.logger.Warn("dataflow: starting count reports", "err", err)
	}
	for _, h := range n.jobs {
		n.startReporterLocked(h)
	}
	n.sched.start()
	n.unhookStart = context.AfterFunc(ctx, n.beginStop)
	started()
	return nil
}

// Started returns a channel closed once Start has succeeded.
func (n *Node) Started() <-chan struct{} { return n.life.Started() }

// Stopped returns a channel closed once a stop has finished: every run has
// returned, every job has reported its last counts and left the cluster,
// and every goroutine the Node started has returned. A Stop or
// StopAndCancel that returned ctx.Err() can be followed by a wait on it.
func (n *Node) Stopped() <-chan struct{} { return n.stopped }

// Stop stops the Node gracefully and waits for it: Ready fails from the
// start; no new runs start (cron fires, triggers and pending catch-ups are
// dropped; streaming loops end after their current batch), runs in
// progress are waited for and completed, then every job's last counts are
// reported and the jobs leave the cluster. Leaving reshards the jobs'
// items to the live servers at once, not after a session timeout, and
// never queues them for failover: a stop is not a crash. Stop returns nil
// once all of that is done (Stopped is closed).
//
// ctx is the grace period (as `shardflow serve --stop-grace`; keep it below
// Kubernetes' terminationGracePeriodSeconds). When it ends first, Stop
// cancels the runs' contexts (the stop becomes StopAndCancel's) and returns
// ctx.Err() at once. The stop goes on in the background: the cancelled runs
// are waited for and completed (their items' next owner runs them again;
// with a transactional source the cut batch rolled back), then the leave,
// its store calls bounded to 10 s from the deadline. Stopped is closed when
// it ends, and nothing the Node started outlives that: wait for it before
// exiting to leave rather than be failed over. TestNodeStopDrains,
// TestStopReturnsAtItsDeadline and, over processes and Postgres,
// examples/pgbatch's TestRollingRestart check this.
//
// Stop is safe before Start and more than once: every call waits for the
// one stop, bounded by its own ctx.
func (n *Node) Stop(ctx context.Context) error {
	n.beginStop()
	return n.awaitStop(ctx)
}

// StopAndCancel stops the Node like Stop but cancels the runs' contexts
// first, so runs end as soon as their code honours ctx. Called while a
// Stop is in flight (or after Start's ctx ended), it escalates that stop.
// It waits for the stop bounded by ctx, as Stop does.
func (n *Node) StopAndCancel(ctx context.Context) error {
	n.beginStop()
	n.escalate()
	return n.awaitStop(ctx)
}

// awaitStop waits for the stop bounded by ctx; when ctx ends first the stop
// is escalated and ctx.Err() returned.
func (n *Node) awaitStop(ctx context.Context) error {
	select {
	case <-n.stopped:
		return nil
	case <-ctx.Done():
		n.escalate()
		return ctx.Err()
	}
}

// beginStop starts the stop once; it does not block.
func (n *Node) beginStop() {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		n.stopping = true
		n.mu.Unlock()
		n.haltCancel()
		go n.teardown()
	})
}

// escalate makes the stop in flight a hard one, once: the runs' contexts
// are cancelled, and teardown's store calls get detachTimeout more.
func (n *Node) escalate() {
	n.escalateOnce.Do(func() {
		n.sched.cancelRuns()
		n.mu.Lock()
		if !n.tornDown {
			n.bound = time.AfterFunc(detachTimeout, n.cancelTeardown)
		}
		n.mu.Unlock()
	})
}

// teardown is the stop, run on the Node's own goroutine. It closes stopped
// when it ends.
func (n *Node) teardown() {
	defer close(n.stopped)
	defer n.cancelTeardown()
	defer func() {
		n.mu.Lock()
		n.tornDown = true
		if n.bound != nil {
			n.bound.Stop()
		}
		n.mu.Unlock()
	}()
	n.life.StopFunc(func(bool) {}) // a later Start fails; Started stays as it was
	// Start cannot set the hook any more: it refuses once stopping is set,
	// which beginStop did before starting this goroutine.
	n.mu.Lock()
	unhook := n.unhookStart
	n.mu.Unlock()
	if unhook != nil {
		unhook()
	}
	tctx := n.teardownCtx

	// Every run returns (graceful: they end on their own; escalated: their
	// contexts are cancelled).
	_ = n.sched.stop(context.Background(), false)
	n.mu.Lock()
	hs := make([]*hostedJob, 0, len(n.jobs))
	for _, h := range n.jobs {
		if h != nil { // nil: still joining; add sees stopping and undoes itself
			hs = append(hs, h)
		}
	}
	n.mu.Unlock()
	// Every job is unscheduled and reports its last counts, side by side;
	// then the Registry's Close leaves all of them together, their offline
	// writes shared in a few transactions (a leave per job would take
	// thousands of store writes for thousands of jobs).
	var detaching errgroup.Group
	detaching.SetLimit(stopLeavers)
	for _, h := range hs {
		detaching.Go(func() error {
			if err := n.detach(tctx, h, false); err != nil {
				n.logger.Warn("dataflow: removing job at stop", "job", h.name, "err", err)
			}
			return nil
		})
	}
	_ = detaching.Wait()
	n.detaching.Wait()
	n.reports.Stop()
	if err := n.reg.Close(tctx); err != nil {
		n.logger.Warn("dataflow: closing registry", "err", err)
	}
	n.cancel()
	if n.metrics != nil {
		n.cfg.Metrics.Unregister(n.metrics)
	}
}

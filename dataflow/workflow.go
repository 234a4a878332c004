package dataflow

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/workflow"
)

// workflowJob is a hosted job's part in workflows.
type workflowJob struct {
	steps *workflow.Steps

	mu        sync.Mutex
	first     bool      // jobs depend on it (read at firstRead)
	firstRead time.Time // zero: never read
	// refresh: the answer's next read ahead of the runs, armed
	// (refreshFirstAhead) until it has read.
	refresh *time.Timer
	kick    *time.Timer
	// timersStop: stopTimers was called, kick and refresh are not armed
	// again; timersActive: a kick or a refresh in progress.
	timersStop   bool
	timersActive sync.WaitGroup

	// trigger: the Czxid of the trigger node the job's next trigger run
	// answers (-1: a local trigger, which has none).
	trigger int64
	// catchUp: the next misfire run is the coordination's catch-up (a
	// Begin found the items running): a fire only if owedFire, set by a
	// fire whose Begin that was (with its trigger), not by a kick's or a
	// failover run's; a cron fire missed during a run is a fire.
	catchUp     bool
	owedFire    bool
	owedTrigger int64
}

// noteTrigger records the trigger node (Czxid czxid; -1: a local
// trigger) that h's next trigger run answers.
func (w *workflowJob) noteTrigger(czxid int64) {
	w.mu.Lock()
	w.trigger = czxid
	w.mu.Unlock()
}

// fireOf decides whether a run of the job for reason is a fire (which may
// start a workflow run) and the trigger node it answers (0: none).
func (w *workflowJob) fireOf(reason Reason, kick bool) (fire bool, trigger int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case kick || reason == ReasonFailover:
		return false, 0
	case reason == ReasonTrigger:
		trigger, w.trigger = max(w.trigger, 0), 0
		return true, trigger
	case reason == ReasonMisfire && w.catchUp:
		fire, trigger = w.owedFire, w.owedTrigger
		w.catchUp, w.owedFire, w.owedTrigger = false, false, 0
		return fire, trigger
	}
	return true, 0
}

// oweFire records a fire whose Begin found the items running: the
// catch-up run after it is that fire.
func (w *workflowJob) oweFire(trigger int64) {
	w.mu.Lock()
	w.owedFire, w.owedTrigger = true, trigger
	w.mu.Unlock()
}

// checkDependsOn checks a job's DependsOn against the namespace before it
// joins: the jobs it names are stored (added to a Node, or `shardflow job
// add`), and it closes no cycle and reaches one first job.
func (n *Node) checkDependsOn(ctx context.Context, cfg JobConfig) error {
	if len(cfg.DependsOn) == 0 {
		return nil
	}
	return workflow.CheckDependsOn(ctx, n.st, n.Namespace(), cfg.JobName, cfg.DependsOn)
}

// linkDependsOn records the effective (stored) config's DependsOn in the
// links its upstream jobs keep to find it.
func (n *Node) linkDependsOn(ctx context.Context, eff JobConfig) error {
	if len(eff.DependsOn) == 0 {
		return nil
	}
	if err := workflow.Link(ctx, n.st, n.Namespace(), eff.JobName, nil, eff.DependsOn); err != nil {
		return fmt.Errorf("link dependsOn: %w", err)
	}
	return nil
}

// isFirst reports whether h starts workflow runs (depends on nothing, and
// jobs depend on it). The answer is kept for the job's reconcile interval:
// a job in no workflow reads its dependents' links at most that often, not
// at every run; a dependency stored meanwhile applies from the first
// job's first fire after that. A job that runs more often than every half
// interval reads it after a run (refreshFirstAhead), never on a run's
// path to BeforeRun.
func (n *Node) isFirst(ctx context.Context, h *hostedJob, cfg JobConfig) (bool, error) {
	if len(cfg.DependsOn) > 0 {
		return false, nil
	}
	w := &h.wf
	w.mu.Lock()
	if !w.firstRead.IsZero() && time.Since(w.firstRead) < max(cfg.ReconcileInterval, time.Second) {
		defer w.mu.Unlock()
		return w.first, nil
	}
	w.mu.Unlock()
	return w.readFirst(ctx)
}

// readFirst reads isFirst's answer (steps.First) and keeps it with the
// time it was read.
func (w *workflowJob) readFirst(ctx context.Context) (bool, error) {
	first, err := w.steps.First(ctx, nil)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	w.first, w.firstRead = first, time.Now()
	w.mu.Unlock()
	return first, nil
}

// refreshFirstAhead arms, after a run, a read of isFirst's answer once it
// is half its interval old, so that the next runs find it fresh: the read
// is not on their way from the fire to BeforeRun. A read at the run made
// each of a tick's runs wait for a read queued behind every other job's on
// the server's session, once a reconcile interval.
//
// The read is not made at once either: the jobs of one cron run at the
// same tick and their answers come due together, so that their reads did
// too (10,000 jobs on 3 servers: 30,000 reads right after one tick in
// three, which took the processes' and ZooKeeper's CPU from that tick's
// runs: its p99 went from 0.5 s to 3.3 s). Each job reads at its own
// offset into the next quarter interval (refreshDelay): a job that runs
// every P finds the answer read before its next run when P is over a
// quarter interval, and, when P is under it, before the answer is the
// interval old. The answer is still never older than the interval (isFirst
// reads it at the run when it is). stopTimers stops it.
func (n *Node) refreshFirstAhead(h *hostedJob) {
	cfg := h.cj.Config()
	if len(cfg.DependsOn) > 0 {
		return
	}
	interval := max(cfg.ReconcileInterval, time.Second)
	w := &h.wf
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timersStop || w.refresh != nil || w.firstRead.IsZero() || time.Since(w.firstRead) < interval/2 {
		return
	}
	w.refresh = time.AfterFunc(refreshDelay(h.name, interval), func() { n.refreshOnce(h) })
}

// refreshDelay is job's offset into a quarter interval: the same job
// always reads at the same offset, and the jobs of a cron at offsets
// spread across it.
func refreshDelay(job string, interval time.Duration) time.Duration {
	f := fnv.New64a()
	_, _ = f.Write([]byte(job))
	return time.Duration(f.Sum64() % uint64(max(interval/4, 1)))
}

// timerStarts counts a timer's work as active (timersActive; the caller
// calls Done) unless the timers were stopped; locked runs under w.mu with
// it. False: stopped, nothing to do.
func (w *workflowJob) timerStarts(locked func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timersStop {
		return false
	}
	w.timersActive.Add(1)
	if locked != nil {
		locked()
	}
	return true
}

// refreshOnce is the read refreshFirstAhead armed.
func (n *Node) refreshOnce(h *hostedJob) {
	w := &h.wf
	if !w.timerStarts(nil) {
		return
	}
	defer w.timersActive.Done()
	ctx, cancel := context.WithTimeout(h.halt, reportTimeout)
	// On an error isFirst reads it at a run once it is the interval old.
	_, _ = w.readFirst(ctx)
	cancel()
	w.mu.Lock()
	w.refresh = nil
	w.mu.Unlock()
}

// pickWorkflow decides which workflow run a run of h serves and which of
// its items it runs (workflow.Steps.Pick): a job in no workflow runs all
// of them in none; on an error a job in a workflow runs none (its next
// run, or the reconcile kick, tries again).
//
// fire: the run is a fire of the job (cron, trigger, catch-up), which may
// start a workflow run; a failover run or a kick serves open ones only.
// trigger: the Czxid of the trigger node the fire answers (0: none).
func (n *Node) pickWorkflow(ctx context.Context, h *hostedJob, cfg JobConfig, assigned []protocol.Assignment, fire bool, trigger int64) (string, []protocol.Assignment, error) {
	first, err := n.isFirst(ctx, h, cfg)
	if err != nil {
		return "", nil, err
	}
	if !first && len(cfg.DependsOn) == 0 {
		return "", assigned, nil
	}
	if first {
		// Its workflow runs' items left behind (their owner crashed and
		// the job was resharded) run at the next kick, not its next fire.
		n.armKick(h, cfg, max(cfg.ReconcileInterval, time.Second))
	}
	items := make([]int, len(assigned))
	for i, a := range assigned {
		items[i] = a.Item
	}
	var pick workflow.Assignment
	if first && fire && trigger > 0 {
		pick, err = h.wf.steps.PickTriggered(ctx, items, cfg.ShardingTotalCount, trigger)
	} else {
		pick, err = h.wf.steps.Pick(ctx, items, cfg.DependsOn, first && fire, cfg.ShardingTotalCount)
	}
	if err != nil {
		return "", nil, err
	}
	if pick.Run == "" {
		if len(cfg.DependsOn) > 0 || first {
			return "", nil, nil // nothing owed, and no workflow run to start
		}
		return "", assigned, nil
	}
	keep := make([]protocol.Assignment, 0, len(pick.Items))
	for _, a := range assigned {
		if slices.Contains(pick.Items, a.Item) {
			keep = append(keep, a)
		}
	}
	return pick.Run, keep, nil
}

// recordWorkflow records the completion of a run's items in its workflow
// run (workflow.Steps.Record), which starts the steps after it when they
// complete its step. A cancelled run records nothing: its items run again
// (their new owner's run, or their failover run) in the same workflow run.
// Nor is an item recorded whose run ended in an error while the run no
// longer owned it (cutByOwnership): that error is the item's cut, not its
// failure, and the item runs again in the workflow run. The record is
// fenced by the run's ownership (protocol.Run.Fence): refused once the
// run lost its items (its session ended after its last check), it records
// nothing and they run again, as for a cancelled run.
func (n *Node) recordWorkflow(ctx context.Context, h *hostedJob, wfRun string, run *protocol.Run, assigned []protocol.Assignment, cancelled bool, res RunResult) {
	if wfRun == "" || cancelled || len(assigned) == 0 {
		return
	}
	itemErr := make(map[int]error, len(res.Items))
	for _, it := range res.Items {
		itemErr[it.Item] = it.Err
	}
	outcomes := make(map[int]string, len(assigned))
	for _, a := range assigned {
		err := itemErr[a.Item]
		if err == nil {
			outcomes[a.Item] = ""
			continue
		}
		if cutByOwnership(ctx, run, a.Item, err) {
			n.logger.Info("dataflow: item cut by a lost ownership; it runs again in its workflow run", "job", h.name, "workflowRun", wfRun, "item", a.Item, "err", err)
			continue
		}
		outcomes[a.Item] = err.Error()
	}
	if len(outcomes) == 0 {
		return
	}
	started, err := h.wf.steps.Record(ctx, wfRun, outcomes, run.Fence()...)
	if errors.Is(err, workflow.ErrNotOwner) {
		n.logger.Info("dataflow: run's items not recorded: it no longer owns them; they run again in their workflow run", "job", h.name, "workflowRun", wfRun, "err", err)
		return
	}
	if err != nil {
		n.reportError(h.name, fmt.Errorf("dataflow: record the run's items in workflow run %s: %w", wfRun, err))
		return
	}
	if len(started) > 0 {
		n.logger.Info("dataflow: workflow steps started", "job", h.name, "workflowRun", wfRun, "started", started)
	}
}

// cutByOwnership reports whether an item whose run ended in err did so
// because the run lost the item: err is a refused fence (ErrNotOwner, or
// ErrSessionLost: a commit on a lost connection or session), or the run
// no longer owns the item now (a job that did not wrap its fence's
// error). The run's context is cancelled only once the protocol sees the
// session end, so a fence can be refused before that.
func cutByOwnership(ctx context.Context, run *protocol.Run, item int, err error) bool {
	if errors.Is(err, protocol.ErrNotOwner) || errors.Is(err, protocol.ErrSessionLost) {
		return true
	}
	return run.CheckOwnership(ctx, item) != nil
}

// hasOpenStep reports whether a job with DependsOn has a step to run: a
// trigger or a kick of one without runs nothing (and begins no run).
func (n *Node) hasOpenStep(ctx context.Context, h *hostedJob) bool {
	open, err := h.wf.steps.Open(ctx)
	if err != nil {
		n.logger.Warn("dataflow: reading the job's workflow runs", "job", h.name, "err", err)
		return true // Begin and Pick decide
	}
	return len(open) > 0
}

// startWorkflow arms h's kick at join when h is in a workflow: a server
// (re)joining owes the items its workflow runs left behind (a crashed
// server restarted with the same id gets its items back, and a first
// job's items run only at its next fire otherwise). For a job that
// depends on nothing this reads whether jobs depend on it: one read per
// AddJob.
//
// The answer is not kept for the runs (isFirst's): jobs added right after
// this one may depend on it.
func (n *Node) startWorkflow(ctx context.Context, h *hostedJob, cfg JobConfig) {
	first, err := h.wf.steps.First(ctx, cfg.DependsOn)
	if err != nil {
		n.logger.Warn("dataflow: reading the jobs that depend on the job", "job", h.name, "err", err)
	}
	if first {
		h.wf.mu.Lock()
		h.wf.first = true
		h.wf.mu.Unlock()
	}
	n.armKick(h, cfg, 0)
}

// armKick starts h's workflow kick when it is in a workflow (its config
// has DependsOn: at once, so that a server joining after a step started
// runs it; a first job: from its first run here), then every reconcile
// interval: a run of this server (reasonKick) when a step of the job is
// open, for the items it owes (they moved here after the trigger or the
// fire, or this server missed it). The kick runs on a timer (no goroutine
// while waiting); stopTimers waits for one in progress.
func (n *Node) armKick(h *hostedJob, cfg JobConfig, after time.Duration) {
	w := &h.wf
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timersStop || len(cfg.DependsOn) == 0 && !w.first {
		return
	}
	if w.kick != nil {
		if after <= 0 {
			w.kick.Reset(0) // now, not at the reconcile tick it waits for
		}
		return
	}
	w.kick = time.AfterFunc(max(after, 0), func() { n.kickOnce(h) })
}

func (n *Node) kickOnce(h *hostedJob) {
	w := &h.wf
	if !w.timerStarts(func() { w.kick = nil }) {
		return
	}
	defer w.timersActive.Done()
	cfg := h.cj.Config()
	ctx, cancel := context.WithTimeout(h.halt, reportTimeout)
	if first, err := n.isFirst(ctx, h, cfg); err == nil && !first && len(cfg.DependsOn) == 0 {
		cancel()
		return // no longer in a workflow: armed again by a config change or a run
	}
	if n.hasOpenStep(ctx, h) {
		n.sched.kick(h.name)
	}
	cancel()
	n.armKick(h, cfg, max(cfg.ReconcileInterval, time.Second))
}

// stopTimers stops h's kick and its answer's refresh, and waits for one
// in progress.
func (n *Node) stopTimers(h *hostedJob) {
	w := &h.wf
	w.mu.Lock()
	w.timersStop = true
	for _, t := range []**time.Timer{&w.kick, &w.refresh} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	w.mu.Unlock()
	w.timersActive.Wait()
}

package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/store"
)

// This file is the operator's skip and cancel of a workflow run (rerun and
// mark-success are in status.go, mark-success with the same checks as skip). Each is one transaction checked against
// the version of every step of the run it read: a step decided, started or
// recorded meanwhile makes it read the run again and decide again (or
// refuse, when the new state does not allow it), so it never undoes a
// decision it did not see.

const (
	// StateSkipped: an operator skipped the step (Skip): it does not run
	// (or no longer counts as failed or stopped) in its workflow run, and
	// counts as succeeded for the steps after it, as PowerJob's "skip
	// when failed" does.
	StateSkipped = "skipped"
	// StateCancelled: an operator cancelled the workflow run (Cancel) while
	// the step was pending or running: no item of it starts after that.
	StateCancelled = "cancelled"
)

// countsAsSuccess reports whether a decided step lets the steps after it
// run as after a success (their upstreamFailure policy is not consulted).
func countsAsSuccess(state string) bool {
	return state == StateSucceeded || state == StateSkipped
}

// ErrSkip is wrapped by Skip's refusals.
var ErrSkip = errors.New("workflow: cannot skip the step")

// ErrCancel is wrapped by Cancel's refusals.
var ErrCancel = errors.New("workflow: cannot cancel workflow run")

// runSteps is a workflow run's steps as read for a decision, by job, with
// the versions they were read at; removed jobs' steps are absent.
type runSteps struct {
	jobs  []string // every job of the run, the first first
	steps map[string]versioned
}

func readRunSteps(ctx context.Context, st store.Store, ns, id string) (runSteps, error) {
	first, _, ok := ParseRunID(id)
	if !ok {
		return runSteps{}, fmt.Errorf("workflow: %q is not a workflow run id (FIRSTJOB-NUMBER, as `shardflow workflow status` lists them)", id)
	}
	root, v, err := ReadStep(ctx, st, ns, first, id)
	if err != nil {
		return runSteps{}, err
	}
	rs := runSteps{jobs: root.Jobs, steps: map[string]versioned{first: {root, v}}}
	for _, j := range root.Jobs[1:] {
		s, v, err := ReadStep(ctx, st, ns, j, id)
		if errors.Is(err, store.ErrNoNode) {
			continue // the job was removed
		}
		if err != nil {
			return runSteps{}, err
		}
		rs.steps[j] = versioned{s, v}
	}
	return rs, nil
}

// status is rs as RunStatus, removed steps included.
func (rs runSteps) status(id string) RunStatus {
	out := RunStatus{Run: id}
	for _, j := range rs.jobs {
		s, ok := rs.steps[j]
		if !ok {
			s.step = Step{Run: id, Job: j, State: StateRemoved}
		}
		out.Steps = append(out.Steps, s.step)
	}
	return out
}

// cancelledAfter returns a cancelled step after job's ("" for none).
func (rs runSteps) cancelledAfter(id, job string) string {
	for _, j := range rs.jobs {
		if s, ok := rs.steps[j]; ok && j != job && s.step.State == StateCancelled && after(rs.status(id), job, false)[j] {
			return j
		}
	}
	return ""
}

// retry runs one fenced decision until it commits without a concurrent
// writer (errReplan), at most maxAttempts times.
func retry[T any](what string, do func() (T, error)) (T, error) {
	for range maxAttempts {
		out, err := do()
		if !errors.Is(err, errReplan) {
			return out, err
		}
	}
	var zero T
	return zero, fmt.Errorf("workflow: %s: no commit after %d attempts (concurrent writers); try again", what, maxAttempts)
}

// Skip is an operator's decision that job's step of workflow run id does
// not run (a pending step) or no longer counts as failed or stopped: the
// step becomes skipped, which counts as succeeded for the steps after it;
// the steps after it that its failure stopped go back to pending, and
// every step this decides starts (or stops, for another failed upstream),
// as when the step's last item completes. One transaction, checked
// against the versions of the steps read. It returns the steps it
// started.
//
// Refused (ErrSkip) for a step that runs (cancel the workflow run, or
// wait for its items), succeeded or was skipped already, a removed job,
// and in a cancelled workflow run (no step of it starts: rerun it).
func Skip(ctx context.Context, st store.Store, ns, id, job string) ([]string, error) {
	return retry("skip "+job+" in "+id, func() ([]string, error) {
		return skip(ctx, st, ns, id, job)
	})
}

func skip(ctx context.Context, st store.Store, ns, id, job string) ([]string, error) {
	rs, err := readRunSteps(ctx, st, ns, id)
	if err != nil {
		return nil, err
	}
	target, ok := rs.steps[job]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w %s of %s: %s is not a job of that workflow run, or was removed (its jobs: %v)", ErrSkip, job, id, job, rs.jobs)
	case rs.cancelledAfter(id, job) != "":
		return nil, fmt.Errorf("%w %s of %s: the step of %s after it was cancelled, so skipping would start nothing; `shardflow workflow rerun` runs the workflow run again from a step", ErrSkip, job, id, rs.cancelledAfter(id, job))
	case target.step.State == StateRunning:
		return nil, fmt.Errorf("%w %s of %s: it is running (%s items); wait for it to end, or cancel the workflow run", ErrSkip, job, id, target.step.Progress())
	case target.step.State != StatePending && target.step.State != StateFailed && target.step.State != StateStopped:
		return nil, fmt.Errorf("%w %s of %s: it is %s; only a pending, failed or stopped step can be skipped", ErrSkip, job, id, target.step.State)
	}
	// The steps after it that a failure stopped: pending again, decided
	// below as if its step had succeeded.
	reset := map[string]versioned{}
	for j := range after(rs.status(id), job, true) {
		if s, ok := rs.steps[j]; ok && j != job {
			s.step.State, s.step.Ended = StatePending, 0
			reset[j] = s
		}
	}
	steps := &Steps{st: st, ns: ns, job: job}
	step := target.step
	step.State, step.Ended = StateSkipped, steps.now()
	ops, started, err := steps.decideAfter(ctx, id, step, reset)
	if err != nil {
		return nil, err
	}
	ops = append(ops, &store.SetOp{Path: stepPath(ns, job, id), Data: encode(step), Version: target.version})
	// A step this plan did not read (decideAfter reads only what it
	// needs) is checked too: every decision on the run was seen.
	ops = append(ops, checkUnread(ns, id, rs, ops)...)
	if _, err := st.Multi(ctx, ops...); err != nil {
		if lostRace(err) {
			return nil, errReplan
		}
		return nil, fmt.Errorf("workflow: skip %s's step of %s: %w", job, id, err)
	}
	return started, nil
}

// checkUnread are check ops for the steps of rs that ops do not write or
// check.
func checkUnread(ns, id string, rs runSteps, ops []store.Op) []store.Op {
	seen := map[string]bool{}
	for _, op := range ops {
		switch o := op.(type) {
		case *store.SetOp:
			seen[o.Path] = true
		case *store.CheckOp:
			seen[o.Path] = true
		}
	}
	var out []store.Op
	for _, j := range rs.jobs {
		s, ok := rs.steps[j]
		if p := stepPath(ns, j, id); ok && !seen[p] {
			out = append(out, &store.CheckOp{Path: p, Version: s.version})
		}
	}
	return out
}

// Cancel is an operator's decision that no further item or step of
// workflow run id runs: every running and every pending step becomes
// cancelled, in one transaction checked against the versions of all the
// run's steps (a completion recorded meanwhile makes it read the run
// again). Once it commits, no run picks a cancelled step's items
// (workflow.Steps.Pick serves running steps only) and no step starts; a
// run that picked its items before that finishes them, and their
// completion is not recorded (the step is decided). It returns the steps
// it cancelled, as they were.
//
// Refused (ErrCancel) when every step of the run is decided already.
func Cancel(ctx context.Context, st store.Store, ns, id string) ([]Step, error) {
	return retry("cancel "+id, func() ([]Step, error) {
		return cancelRun(ctx, st, ns, id)
	})
}

func cancelRun(ctx context.Context, st store.Store, ns, id string) ([]Step, error) {
	rs, err := readRunSteps(ctx, st, ns, id)
	if err != nil {
		return nil, err
	}
	now := (&Steps{}).now()
	var ops []store.Op
	var was []Step
	for _, j := range rs.jobs {
		s, ok := rs.steps[j]
		if !ok {
			continue
		}
		p := stepPath(ns, j, id)
		if s.step.State != StatePending && s.step.State != StateRunning {
			ops = append(ops, &store.CheckOp{Path: p, Version: s.version})
			continue
		}
		was = append(was, s.step)
		if s.step.State == StateRunning {
			open := jobPath(ns, j, nWorkflow, nOpen, id)
			if ok, _, err := st.Exists(ctx, open); err != nil {
				return nil, fmt.Errorf("workflow: read %s: %w", open, err)
			} else if ok {
				ops = append(ops, &store.DeleteOp{Path: open, Version: store.AnyVersion})
			}
		}
		next := s.step
		next.State, next.Ended = StateCancelled, now
		ops = append(ops, &store.SetOp{Path: p, Data: encode(next), Version: s.version})
	}
	if len(was) == 0 {
		return nil, fmt.Errorf("%w %s: every step of it is decided already (%s); nothing runs to cancel", ErrCancel, id, summary(rs.status(id)))
	}
	if _, err := st.Multi(ctx, ops...); err != nil {
		if lostRace(err) {
			return nil, errReplan
		}
		return nil, fmt.Errorf("workflow: cancel %s: %w", id, err)
	}
	return was, nil
}

// summary lists a run's steps' states, e.g. "a succeeded, b failed".
func summary(rs RunStatus) string {
	out := ""
	for i, s := range rs.Steps {
		if i > 0 {
			out += ", "
		}
		out += s.Job + " " + s.State
	}
	return out
}

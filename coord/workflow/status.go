package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/shardflow/shardflow/coord/store"
)

// RunStatus is one workflow run: its id and every step of it, the first
// job's first.
type RunStatus struct {
	Run   string `json:"run"`
	Steps []Step `json:"steps"`
}

// FirstJobs returns the jobs of namespace ns that started workflow runs,
// sorted.
func FirstJobs(ctx context.Context, st store.Store, ns string) ([]string, error) {
	names, _, err := st.Children(ctx, store.Join(ns))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", store.Join(ns), err)
	}
	var out []string
	for _, j := range names {
		ok, _, err := st.Exists(ctx, jobPath(ns, j, nWorkflow, nSeq))
		if err != nil {
			return nil, fmt.Errorf("workflow: read %s: %w", jobPath(ns, j, nWorkflow, nSeq), err)
		}
		if ok {
			out = append(out, j)
		}
	}
	return out, nil
}

// Runs returns the last n workflow runs first started (newest first), each
// with its steps.
func Runs(ctx context.Context, st store.Store, ns, first string, n int) ([]RunStatus, error) {
	ids, _, err := st.Children(ctx, jobPath(ns, first, nWorkflow, nRuns))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", jobPath(ns, first, nWorkflow, nRuns), err)
	}
	slices.SortFunc(ids, func(a, b string) int { return compareRuns(b, a) })
	var out []RunStatus
	for _, id := range ids {
		if len(out) == n {
			break
		}
		if f, _, ok := ParseRunID(id); !ok || f != first {
			continue // a step of a run another job started
		}
		rs, err := ReadRun(ctx, st, ns, id)
		if errors.Is(err, store.ErrNoNode) {
			continue // pruned meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// ReadRun reads workflow run id and its steps.
func ReadRun(ctx context.Context, st store.Store, ns, id string) (RunStatus, error) {
	first, _, ok := ParseRunID(id)
	if !ok {
		return RunStatus{}, fmt.Errorf("workflow: %q is not a workflow run id (FIRSTJOB-NUMBER, as `shardflow workflow status` lists them)", id)
	}
	root, _, err := ReadStep(ctx, st, ns, first, id)
	if err != nil {
		return RunStatus{}, err
	}
	rs := RunStatus{Run: id, Steps: []Step{root}}
	for _, j := range root.Jobs[1:] {
		step, _, err := ReadStep(ctx, st, ns, j, id)
		if errors.Is(err, store.ErrNoNode) {
			step, err = Step{Run: id, Job: j, State: StateRemoved}, nil // the job was removed
		}
		if err != nil {
			return RunStatus{}, err
		}
		rs.Steps = append(rs.Steps, step)
	}
	return rs, nil
}

// ErrRerun is wrapped by Rerun's refusals.
var ErrRerun = errors.New("workflow: cannot rerun")

// Rerun runs job's step of workflow run id again, and every step after it
// in that run: those steps go back to pending (their items' completions
// deleted), then job's step starts (its servers triggered), in the same
// workflow run. It refuses (ErrRerun) while a step of the run runs, and
// when a step job depends on is not decided.
func Rerun(ctx context.Context, st store.Store, ns, id, job string) error {
	rs, err := ReadRun(ctx, st, ns, id)
	if err != nil {
		return err
	}
	byJob := map[string]Step{}
	for _, s := range rs.Steps {
		byJob[s.Job] = s
		if s.State == StateRunning {
			return fmt.Errorf("%w %s from %s: its step of %s is running; wait for it to end", ErrRerun, id, job, s.Job)
		}
	}
	from, ok := byJob[job]
	if !ok {
		return fmt.Errorf("%w %s from %s: %s is not a job of that workflow run (its jobs: %v)", ErrRerun, id, job, job, rs.Steps[0].Jobs)
	}
	for _, u := range from.Upstreams {
		if !byJob[u].Decided() || byJob[u].State == StateCancelled {
			return fmt.Errorf("%w %s from %s: the step of %s, which %s depends on, has not run", ErrRerun, id, job, u, job)
		}
	}
	again := after(rs, job, false)
	// Each step's items' completions go first, outside the transaction
	// (they may be many); the steps' states are then written together,
	// checked against the versions read, so a concurrent change refuses.
	var ops []store.Op
	for _, s := range rs.Steps {
		if !again[s.Job] {
			continue
		}
		_, version, err := ReadStep(ctx, st, ns, s.Job, id)
		if err != nil {
			return err
		}
		if err := clearItems(ctx, st, ns, s.Job, id); err != nil {
			return err
		}
		s.Completed, s.Failed, s.Started, s.Ended, s.State = 0, 0, 0, 0, StatePending
		if s.Job == job {
			s.State = StateRunning
			s.Started = (&Steps{}).now()
			if s.Total, err = (&Steps{st: st, ns: ns}).totalOf(ctx, job); err != nil {
				return err
			}
			trig, err := triggerOps(ctx, st, ns, job)
			if err != nil {
				return err
			}
			ops = append(ops, &store.CreateOp{Path: jobPath(ns, job, nWorkflow, nOpen, id)})
			ops = append(ops, trig...)
		}
		ops = append(ops, &store.SetOp{Path: stepPath(ns, s.Job, id), Data: encode(s), Version: version})
	}
	if _, err := st.Multi(ctx, ops...); err != nil {
		if lostRace(err) {
			return fmt.Errorf("%w %s from %s: the workflow run changed meanwhile; look at it again (`shardflow workflow status`)", ErrRerun, id, job)
		}
		return fmt.Errorf("workflow: rerun %s from %s: %w", id, job, err)
	}
	return nil
}

// Progress formats a step's items, e.g. "5/8 (1 failed)"; "-" before
// it ran.
func (s Step) Progress() string {
	if s.Total == 0 {
		return "-"
	}
	out := strconv.Itoa(s.Completed) + "/" + strconv.Itoa(s.Total)
	if s.Failed > 0 {
		out += " (" + strconv.Itoa(s.Failed) + " failed)"
	}
	return out
}

// MarkSucceeded is an operator's decision that job's failed or stopped
// step of workflow run id counts as succeeded: the steps after it that
// its failure stopped go back to pending, and every step this decides
// starts (or stops, for another failed upstream), as when the step's last
// item completes. One transaction, checked against the versions of the
// steps read (a decision committed meanwhile makes it read the run again
// and decide again, or refuse). It returns the steps it started.
func MarkSucceeded(ctx context.Context, st store.Store, ns, id, job string) ([]string, error) {
	return retry("mark "+job+" succeeded in "+id, func() ([]string, error) {
		return markSucceeded(ctx, st, ns, id, job)
	})
}

func markSucceeded(ctx context.Context, st store.Store, ns, id, job string) ([]string, error) {
	rs, err := readRunSteps(ctx, st, ns, id)
	if err != nil {
		return nil, err
	}
	target, ok := rs.steps[job]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w %s: %s is not a job of that workflow run, or was removed (its jobs: %v)", ErrMark, id, job, rs.jobs)
	case target.step.State != StateFailed && target.step.State != StateStopped:
		return nil, fmt.Errorf("%w %s: the step of %s is %s; only a failed or stopped step can be marked succeeded", ErrMark, id, job, target.step.State)
	}
	// The steps after it that a failure stopped: pending again, decided
	// below as after a success.
	reset := map[string]versioned{}
	for j := range after(rs.status(id), job, true) {
		if s, ok := rs.steps[j]; ok && j != job {
			s.step.State, s.step.Ended = StatePending, 0
			reset[j] = s
		}
	}
	steps := &Steps{st: st, ns: ns, job: job}
	step := target.step
	step.State = StateSucceeded
	if step.Ended == 0 {
		step.Ended = steps.now()
	}
	ops, started, err := steps.decideAfter(ctx, id, step, reset)
	if err != nil {
		return nil, err
	}
	ops = append(ops, &store.SetOp{Path: stepPath(ns, job, id), Data: encode(step), Version: target.version})
	ops = append(ops, checkUnread(ns, id, rs, ops)...)
	if _, err := st.Multi(ctx, ops...); err != nil {
		if lostRace(err) {
			return nil, errReplan
		}
		return nil, fmt.Errorf("workflow: mark %s's step of %s succeeded: %w", job, id, err)
	}
	return started, nil
}

// ErrMark is wrapped by MarkSucceeded's refusals.
var ErrMark = errors.New("workflow: cannot mark the step of workflow run")

// after returns job and the steps after it in rs (only the stopped ones,
// through stopped ones, when stopped is set).
func after(rs RunStatus, job string, stopped bool) map[string]bool {
	out := map[string]bool{job: true}
	for changed := true; changed; {
		changed = false
		for _, s := range rs.Steps {
			if out[s.Job] || stopped && s.State != StateStopped {
				continue
			}
			for _, u := range s.Upstreams {
				if out[u] {
					out[s.Job], changed = true, true
					break
				}
			}
		}
	}
	return out
}

// clearItems deletes the completions of job's items in workflow run id:
// the step runs them again.
func clearItems(ctx context.Context, st store.Store, ns, job, id string) error {
	items := store.Join(stepPath(ns, job, id), nItems)
	names, _, err := st.Children(ctx, items)
	if err != nil {
		return fmt.Errorf("workflow: list %s: %w", items, err)
	}
	for _, n := range names {
		if err := st.Delete(ctx, store.Join(items, n), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("workflow: delete %s: %w", store.Join(items, n), err)
		}
	}
	return nil
}

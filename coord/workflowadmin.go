package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// The operator's actions on a workflow run (docs/workflows.md): each is
// coord/workflow's one fenced transaction, done through the Admin so that
// the CLI, the console and programs get the same checks and each action
// that succeeds is in the audit log of the job it acted on (the first
// job's for a cancel), its Detail naming the workflow run and what the
// action did. A refusal (workflow.ErrRerun, ErrMark, ErrSkip, ErrCancel)
// says why and changes nothing.

// ErrNoWorkflowRun: the named workflow run is not stored (never started,
// or pruned: a first job keeps its last workflow.KeepRuns runs).
var ErrNoWorkflowRun = errors.New("coord: no such workflow run; `shardflow workflow status` lists them")

// WorkflowRerun runs job's step of workflow run run again, with every
// step after it (workflow.Rerun).
func (a *Admin) WorkflowRerun(ctx context.Context, run, job string) error {
	act := Action{Job: job, Action: "workflow rerun", Detail: "workflow run " + run}
	return a.workflowAct(ctx, run, act, func() (string, error) {
		return "", workflow.Rerun(ctx, a.st, a.ns, run, job)
	})
}

// WorkflowMarkSucceeded counts job's failed or stopped step of workflow
// run run as succeeded (workflow.MarkSucceeded) and returns the steps
// that started.
func (a *Admin) WorkflowMarkSucceeded(ctx context.Context, run, job string) ([]string, error) {
	var started []string
	act := Action{Job: job, Action: "workflow mark-success", Detail: "workflow run " + run}
	err := a.workflowAct(ctx, run, act, func() (string, error) {
		var err error
		started, err = workflow.MarkSucceeded(ctx, a.st, a.ns, run, job)
		return startedDetail(started), err
	})
	return started, err
}

// startedDetail says which steps an action started, for the audit log.
func startedDetail(started []string) string {
	if len(started) == 0 {
		return "started no step"
	}
	return "started " + strings.Join(started, ", ")
}

// WorkflowSkip skips job's pending, failed or stopped step of workflow
// run run (workflow.Skip) and returns the steps that started.
func (a *Admin) WorkflowSkip(ctx context.Context, run, job string) ([]string, error) {
	var started []string
	act := Action{Job: job, Action: "workflow skip", Detail: "workflow run " + run}
	err := a.workflowAct(ctx, run, act, func() (string, error) {
		var err error
		started, err = workflow.Skip(ctx, a.st, a.ns, run, job)
		return startedDetail(started), err
	})
	return started, err
}

// WorkflowCancel cancels workflow run run (workflow.Cancel) and returns
// the steps it cancelled, as they were.
func (a *Admin) WorkflowCancel(ctx context.Context, run string) ([]workflow.Step, error) {
	first, _, _ := workflow.ParseRunID(run)
	var was []workflow.Step
	act := Action{Job: first, Action: "workflow cancel", Detail: "workflow run " + run}
	err := a.workflowAct(ctx, run, act, func() (string, error) {
		var err error
		was, err = workflow.Cancel(ctx, a.st, a.ns, run)
		var b strings.Builder
		for i, s := range was {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (was %s)", s.Job, s.State)
		}
		return "cancelled " + b.String(), err
	})
	return was, err
}

// workflowAct does one workflow action on run, an existing workflow run
// (else ErrNoWorkflowRun) of act.Job, an existing job (else ErrNoJob):
// do, then the action is recorded in the job's audit log with what do
// says it did appended to act.Detail (as audited does, which records
// the Action as it was before do).
func (a *Admin) workflowAct(ctx context.Context, run string, act Action, do func() (string, error)) error {
	first, _, ok := workflow.ParseRunID(run)
	if !ok {
		return fmt.Errorf("%w: %q is not a workflow run id (FIRSTJOB-NUMBER)", ErrNoWorkflowRun, run)
	}
	if _, err := a.requireJob(ctx, act.Job); err != nil {
		return err
	}
	if _, _, err := workflow.ReadStep(ctx, a.st, a.ns, first, run); errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("%w: %q in namespace %q", ErrNoWorkflowRun, run, a.ns)
	} else if err != nil {
		return err
	}
	did, err := do()
	if err != nil {
		return err
	}
	if did != "" {
		act.Detail += "; " + did
	}
	return a.audited(ctx, act, func() error { return nil })
}

// WorkflowRun reads workflow run run with every step of it
// (ErrNoWorkflowRun when it is not stored).
func (a *Admin) WorkflowRun(ctx context.Context, run string) (workflow.RunStatus, error) {
	if _, _, ok := workflow.ParseRunID(run); !ok {
		return workflow.RunStatus{}, fmt.Errorf("%w: %q is not a workflow run id (FIRSTJOB-NUMBER)", ErrNoWorkflowRun, run)
	}
	rs, err := workflow.ReadRun(ctx, a.st, a.ns, run)
	if errors.Is(err, store.ErrNoNode) {
		return rs, fmt.Errorf("%w: %q in namespace %q", ErrNoWorkflowRun, run, a.ns)
	}
	return rs, err
}

// JobWorkflowSteps returns job's steps in its last n workflow runs, newest
// first (none for a job in no workflow; ErrNoJob for no such job).
func (a *Admin) JobWorkflowSteps(ctx context.Context, job string, n int) ([]workflow.Step, error) {
	if _, err := a.requireJob(ctx, job); err != nil {
		return nil, err
	}
	return workflow.JobSteps(ctx, a.st, a.ns, job, n)
}

package coord

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/workflow"
)

// checkDependsOn checks a write of field that leaves the job's config
// next: when field is dependsOn, against the namespace (coord/workflow:
// an unknown job, a cycle, two first jobs). Other fields need no check
// here (jobconfig.Validate refuses a cron beside dependsOn).
func (a *tree) checkDependsOn(ctx context.Context, job, field string, next jobconfig.Config) error {
	if field != jobconfig.FieldDependsOn || len(next.DependsOn) == 0 {
		return nil
	}
	return workflow.CheckDependsOn(ctx, a.st, a.ns, job, next.DependsOn)
}

// linkDependsOn records a stored dependsOn (was: the stored text before
// the write) in the reverse links the jobs before it keep.
func (a *tree) linkDependsOn(ctx context.Context, job, field, was string, next jobconfig.Config) error {
	if field != jobconfig.FieldDependsOn {
		return nil
	}
	if err := workflow.Link(ctx, a.st, a.ns, job, jobconfig.ParseList(was), next.DependsOn); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	return nil
}

// WorkflowRuns returns the last n workflow runs (newest first) that first
// started, each with its steps (docs/workflows.md); with first "" those of
// every job that started workflow runs, job by job.
func (a *Admin) WorkflowRuns(ctx context.Context, first string, n int) ([]workflow.RunStatus, error) {
	firsts := []string{first}
	if first == "" {
		var err error
		if firsts, err = workflow.FirstJobs(ctx, a.st, a.ns); err != nil {
			return nil, err
		}
	}
	out := []workflow.RunStatus{}
	for _, f := range firsts {
		runs, err := workflow.Runs(ctx, a.st, a.ns, f, n)
		if err != nil {
			return nil, err
		}
		out = append(out, runs...)
	}
	return out, nil
}

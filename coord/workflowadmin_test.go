package coord_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/workflow"
)

// TestAdminWorkflowActions: the workflow actions through the Admin act on
// the run and are audited on the job acted on, with the run and what they
// did; refusals (a running step, an unknown run or job) are not audited
// and change nothing.
func TestAdminWorkflowActions(t *testing.T) {
	st := memstore.NewServer().Connect()
	ctx := ctxT(t)
	admin := coord.NewAdmin(st, "wf").As("alice")
	for _, c := range []jobconfig.Config{
		{JobName: "a"},
		{JobName: "b", DependsOn: []string{"a"}},
		{JobName: "c", DependsOn: []string{"a"}},
		{JobName: "d", DependsOn: []string{"b", "c"}},
	} {
		c.ShardingTotalCount = 2
		if err := admin.CreateJob(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	audit := func(job string) []coord.Action {
		t.Helper()
		js, err := admin.Status(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		var out []coord.Action
		for _, a := range js.Actions {
			if a.Action != "create" {
				out = append(out, a)
			}
		}
		return out
	}
	pick, err := workflow.ForJob(st, "wf", "a").Pick(ctx, []int{0, 1}, nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	run := pick.Run
	if _, err := admin.WorkflowSkip(ctx, run, "a"); !errors.Is(err, workflow.ErrSkip) {
		t.Fatalf("skip of the running step a: %v, want ErrSkip", err)
	}
	if _, err := admin.WorkflowSkip(ctx, "a-0000000099", "b"); !errors.Is(err, coord.ErrNoWorkflowRun) {
		t.Fatalf("skip in an unknown run: %v, want ErrNoWorkflowRun", err)
	}
	if _, err := admin.WorkflowCancel(ctx, "nope"); !errors.Is(err, coord.ErrNoWorkflowRun) {
		t.Fatalf("cancel of %q: %v, want ErrNoWorkflowRun", "nope", err)
	}
	if _, err := admin.WorkflowSkip(ctx, run, "zz"); !errors.Is(err, coord.ErrNoJob) {
		t.Fatalf("skip of an unknown job: %v, want ErrNoJob", err)
	}
	if acts := audit("a"); len(acts) != 0 {
		t.Fatalf("refusals audited: %+v", acts)
	}
	started, err := admin.WorkflowSkip(ctx, run, "b")
	if err != nil || len(started) != 0 {
		t.Fatalf("skip b = %v, %v; want nothing started", started, err)
	}
	if acts := audit("b"); len(acts) != 1 || acts[0].Action != "workflow skip" || acts[0].Actor != "alice" || acts[0].Detail != "workflow run "+run+"; started no step" {
		t.Fatalf("b's audit %+v, want alice's skip in %s that started no step", acts, run)
	}
	was, err := admin.WorkflowCancel(ctx, run)
	if err != nil || len(was) != 3 {
		t.Fatalf("cancel = %+v, %v; want a, c and d cancelled", was, err)
	}
	want := "workflow run " + run + "; cancelled a (was running), c (was pending), d (was pending)"
	if acts := audit("a"); len(acts) != 1 || acts[0].Action != "workflow cancel" || acts[0].Detail != want {
		t.Fatalf("a's audit %+v, want a cancel with detail %q", acts, want)
	}
	if err := admin.WorkflowRerun(ctx, run, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.WorkflowMarkSucceeded(ctx, run, "c"); !errors.Is(err, workflow.ErrMark) {
		t.Fatalf("mark-success of the pending c: %v, want ErrMark", err)
	}
	var got []string
	for _, a := range audit("a") {
		got = append(got, a.Action)
	}
	if !slices.Equal(got, []string{"workflow rerun", "workflow cancel"}) {
		t.Fatalf("a's audit %v, want the rerun, then the cancel", got)
	}
	if rs, err := admin.WorkflowRun(ctx, run); err != nil || len(rs.Steps) != 4 || rs.Steps[0].State != workflow.StateRunning {
		t.Fatalf("WorkflowRun = %+v, %v; want 4 steps, a running again", rs, err)
	}
	if _, err := admin.WorkflowRun(ctx, "a-0000000099"); !errors.Is(err, coord.ErrNoWorkflowRun) {
		t.Fatalf("WorkflowRun of an unknown run: %v, want ErrNoWorkflowRun", err)
	}
	if steps, err := admin.JobWorkflowSteps(ctx, "d", 10); err != nil || len(steps) != 1 || steps[0].Run != run || steps[0].State != workflow.StatePending {
		t.Fatalf("JobWorkflowSteps(d) = %+v, %v; want d's pending step of %s", steps, err, run)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/workflow"
)

// runWorkflow is `shardflow workflow status|rerun|mark-success|skip|cancel`: the workflow runs of
// jobs with dependsOn (docs/workflows.md).
func runWorkflow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || cli.HelpArg(args[0]) {
		return cli.GroupUsage(args, stdout, "workflow")
	}
	switch args[0] {
	case "status":
		return runWorkflowStatus(ctx, args[1:], stdout, stderr)
	case "rerun":
		return runWorkflowRerun(ctx, args[1:], stdout, stderr)
	case "mark-success":
		return runWorkflowMarkSuccess(ctx, args[1:], stdout, stderr)
	case "skip":
		return runWorkflowSkip(ctx, args[1:], stdout, stderr)
	case "cancel":
		return runWorkflowCancel(ctx, args[1:], stdout, stderr)
	}
	return cli.Usagef("unknown workflow subcommand %q: use workflow status | rerun | mark-success | skip | cancel", args[0])
}

func runWorkflowStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("workflow status", stderr)
	first := fs.String("job", "", "the first job of the workflows to show (default: every job that started workflow runs)")
	run := fs.String("run", "", "one workflow run's id, as listed")
	last := fs.Int("runs", 10, "how many of the last workflow runs to show, per first job")
	asJSON := fs.Bool("json", false, "print a JSON array of runs, each with its steps")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *last <= 0 {
		return cli.Usagef("--runs must be > 0, got %d", *last)
	}
	st, _, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	var runs []workflow.RunStatus
	switch {
	case *run != "":
		rs, err := workflow.ReadRun(ctx, st, cf.Namespace, *run)
		if err != nil {
			return err
		}
		runs = append(runs, rs)
	default:
		firsts := []string{*first}
		if *first == "" {
			if firsts, err = workflow.FirstJobs(ctx, st, cf.Namespace); err != nil {
				return err
			}
		}
		for _, f := range firsts {
			rs, err := workflow.Runs(ctx, st, cf.Namespace, f, *last)
			if err != nil {
				return err
			}
			runs = append(runs, rs...)
		}
	}
	if *asJSON {
		if runs == nil {
			runs = []workflow.RunStatus{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(runs)
	}
	if len(runs) == 0 {
		fmt.Fprintf(stdout, "no workflow runs in namespace %s (a job's fire starts one when jobs depend on it: `shardflow job add --depends-on`)\n", cf.Namespace)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW RUN\tSTEP\tSTATE\tITEMS\tSTARTED\tENDED")
	for _, rs := range runs {
		for _, s := range rs.Steps {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rs.Run, s.Job, s.State, s.Progress(), millis(s.Started), millis(s.Ended))
		}
	}
	return tw.Flush()
}

// millis formats Unix milliseconds as UTC RFC 3339, "-" for none.
func millis(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// workflowAction parses a workflow action's flags (--run and, unless
// jobFlag is "", the job flag, both required), opens the store and does do and opens the Admin: the actions go through
// coord.Admin, checked and audited like every other operator action.
func workflowAction(ctx context.Context, name, jobFlag, jobUsage string, args []string, stderr io.Writer,
	do func(ctx context.Context, admin *coord.Admin, run, job string) error) error {
	fs, cf := cli.ZKFlagSet("workflow "+name, stderr)
	run := fs.String("run", "", "the workflow run's id, as `shardflow workflow status` lists it (required)")
	var job *string
	if jobFlag != "" {
		job = fs.String(jobFlag, "", jobUsage+" (required)")
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *run == "" || job != nil && *job == "" {
		if job == nil {
			return cli.Usagef("--run is required: workflow %s --run ID", name)
		}
		return cli.Usagef("--run and --%s are required: workflow %s --run ID --%s JOB", jobFlag, name, jobFlag)
	}
	st, admin, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if job == nil {
		job = new(string)
	}
	return do(ctx, admin, *run, *job)
}

func runWorkflowRerun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workflowAction(ctx, "rerun", "from", "the job whose step runs again, with every step after it", args, stderr,
		func(ctx context.Context, admin *coord.Admin, run, from string) error {
			if err := admin.WorkflowRerun(ctx, run, from); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "workflow rerun: %s runs again from %s in workflow run %s; its servers were triggered\n", from, from, run)
			return nil
		})
}

func runWorkflowMarkSuccess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workflowAction(ctx, "mark-success", "job", "the job whose failed or stopped step counts as succeeded", args, stderr,
		func(ctx context.Context, admin *coord.Admin, run, job string) error {
			started, err := admin.WorkflowMarkSucceeded(ctx, run, job)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "workflow mark-success: %s's step of %s counts as succeeded; %s\n", job, run, startedSentence(started))
			return nil
		})
}

// startedSentence says which steps an action started.
func startedSentence(started []string) string {
	if len(started) == 0 {
		return "no step started (the steps after it wait for other steps)"
	}
	return "started " + strings.Join(started, ", ")
}

func runWorkflowSkip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workflowAction(ctx, "skip", "job", "the job whose pending, failed or stopped step is skipped", args, stderr,
		func(ctx context.Context, admin *coord.Admin, run, job string) error {
			started, err := admin.WorkflowSkip(ctx, run, job)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "workflow skip: %s's step of %s is skipped (it counts as succeeded for the steps after it); %s\n", job, run, startedSentence(started))
			return nil
		})
}

func runWorkflowCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workflowAction(ctx, "cancel", "", "", args, stderr,
		func(ctx context.Context, admin *coord.Admin, run, _ string) error {
			was, err := admin.WorkflowCancel(ctx, run)
			if err != nil {
				return err
			}
			var steps []string
			for _, s := range was {
				steps = append(steps, s.Job+" (was "+s.State+")")
			}
			fmt.Fprintf(stdout, "workflow cancel: %s cancelled: %s; no item or step of it starts now (items running finish, unrecorded)\n", run, strings.Join(steps, ", "))
			return nil
		})
}

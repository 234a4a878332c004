package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/workflow"
)

// runWorkflow is `shardflow workflow status|rerun|mark-success`: the workflow runs of
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
	}
	return cli.Usagef("unknown workflow subcommand %q: use workflow status | workflow rerun | workflow mark-success", args[0])
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

func runWorkflowRerun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("workflow rerun", stderr)
	run := fs.String("run", "", "the workflow run's id, as `shardflow workflow status` lists it (required)")
	from := fs.String("from", "", "the job whose step runs again, with every step after it (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *run == "" || *from == "" {
		return cli.Usagef("--run and --from are required: workflow rerun --run ID --from JOB")
	}
	st, _, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := workflow.Rerun(ctx, st, cf.Namespace, *run, *from); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "workflow rerun: %s runs again from %s in workflow run %s; its servers were triggered\n", *from, *from, *run)
	return nil
}

func runWorkflowMarkSuccess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("workflow mark-success", stderr)
	run := fs.String("run", "", "the workflow run's id, as `shardflow workflow status` lists it (required)")
	job := fs.String("job", "", "the job whose failed or stopped step counts as succeeded (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *run == "" || *job == "" {
		return cli.Usagef("--run and --job are required: workflow mark-success --run ID --job JOB")
	}
	st, _, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := workflow.MarkSucceeded(ctx, st, cf.Namespace, *run, *job); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "workflow mark-success: %s's step of %s counts as succeeded; the steps after it that it decides start\n", *job, *run)
	return nil
}

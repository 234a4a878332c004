package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/internal/redact"
)

// statusDocument is the JSON document `shardflow status --json` prints
// (documented in docs/operations.md).
type statusDocument struct {
	Namespace string            `json:"namespace"`
	Jobs      []coord.JobStatus `json:"jobs"`
	// Unreadable lists the jobs whose status could not be read (a
	// malformed node, say), beside the jobs that could: one broken job
	// never hides the others.
	Unreadable []unreadableJob `json:"unreadable,omitempty"`
}

// unreadableJob is a job a view lists without its status, and why.
type unreadableJob struct {
	Job   string `json:"job"`
	Error string `json:"error"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("status", stderr)
	job := fs.String("job", "", "only this job (default: every job in the namespace)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
		doc, err := collectStatus(ctx, admin, cf.Namespace, *job)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(doc)
		}
		printStatus(stdout, doc)
		return nil
	})
}

func collectStatus(ctx context.Context, admin *coord.Admin, namespace, job string) (statusDocument, error) {
	doc := statusDocument{Namespace: namespace, Jobs: []coord.JobStatus{}}
	names := []string{job}
	if job == "" {
		var err error
		if names, err = admin.Jobs(ctx); err != nil {
			return doc, fmt.Errorf("list jobs in namespace %q: %w", namespace, err)
		}
	}
	for _, name := range names {
		s, err := admin.Status(ctx, name)
		switch {
		case err != nil && job != "":
			return doc, fmt.Errorf("status of job %q: %w", name, err)
		case errors.Is(err, coord.ErrNoJob):
			continue // removed meanwhile
		case err != nil:
			if ctx.Err() != nil {
				return doc, fmt.Errorf("status of job %q: %w", name, err)
			}
			doc.Unreadable = append(doc.Unreadable, unreadableJob{Job: name, Error: redact.Text(err.Error())})
			continue
		}
		doc.Jobs = append(doc.Jobs, s)
	}
	return doc, nil
}

func printStatus(w io.Writer, doc statusDocument) {
	for _, u := range doc.Unreadable {
		fmt.Fprintf(w, "job %s   UNREADABLE: %s\n", printable(u.Job), printable(u.Error))
	}
	if len(doc.Jobs) == 0 && len(doc.Unreadable) == 0 {
		fmt.Fprintf(w, "namespace %q has no jobs\n", doc.Namespace)
		return
	}
	for i, js := range doc.Jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printJobStatus(w, js)
	}
}

func printJobStatus(w io.Writer, js coord.JobStatus) {
	fmt.Fprintf(w, "job %s   health %s   leader %s", printable(js.Job), js.Health, printable(cli.OrDash(js.Leader)))
	if js.ReshardingPending {
		fmt.Fprint(w, "   resharding pending")
	}
	if len(js.FailoverQueue) > 0 {
		fmt.Fprintf(w, "   failover queue %s", cli.JoinInts(js.FailoverQueue))
	}
	fmt.Fprintf(w, "   next fire %s", fmtTime(js.NextFireTime))
	fmt.Fprintln(w)
	if js.ConfigError != "" {
		fmt.Fprintf(w, "  CONFIG ERROR: %s\n", printable(js.ConfigError))
	}
	if js.Health != coord.HealthOK {
		for _, r := range js.HealthReasons {
			if !strings.HasPrefix(r, "item ") && !strings.HasPrefix(r, "stored config invalid") {
				fmt.Fprintf(w, "  %s: %s\n", strings.ToUpper(js.Health), printable(r))
			}
		}
	}
	for _, r := range js.Refused {
		fmt.Fprintf(w, "  REFUSED by %s: %s\n", printable(r.ID), printable(r.Reason))
	}
	keys := make([]string, 0, len(js.Config))
	for k := range js.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cfg []string
	for _, k := range keys {
		if v := js.Config[k]; v != "" {
			cfg = append(cfg, k+"="+printable(v))
		}
	}
	fmt.Fprintf(w, "  config: %s\n", strings.Join(cfg, " "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERVER\tSTATUS\tITEMS\tSUCCESS (LAST/TOTAL)\tFAILURE (LAST/TOTAL)\tCOUNTS AS OF\tFLAGS\tLAST ERROR")
	for _, s := range js.Servers {
		var flags []string
		if s.Disabled {
			flags = append(flags, "disabled")
		}
		if s.Paused {
			flags = append(flags, "paused")
		}
		if s.Shutdown {
			flags = append(flags, "shutdown")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%d/%d\t%s\t%s\t%s\n", printable(s.ID), printable(s.Status), cli.JoinInts(s.Sharding),
			s.ProcessSuccessCount, s.TotalSuccessCount, s.ProcessFailureCount, s.TotalFailureCount, fmtTime(s.CountsAsOf),
			cli.OrDash(strings.Join(flags, ",")), printable(cli.OrDash(s.LastError)))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ITEM\tSTATE\tFAILOVER\tLAST BEGIN\tLAST COMPLETE\tNEXT FIRE")
	for _, it := range js.Items {
		state := "idle"
		switch {
		case it.Disabled:
			state = "disabled"
		case it.Running:
			state = "running"
		case it.ConsecutiveFailures > 0:
			state = "failing"
		case it.Completed:
			state = "completed"
		}
		if it.ConsecutiveFailures > 0 && it.Running {
			state += "+failing"
		}
		if it.Misfire {
			state += "+misfire"
		}
		failover := printable(it.Failover)
		if failover == "" && it.FailoverLost != "" {
			failover = printable(it.FailoverLost) + " (lost)" // its claimant's session ended mid-run
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", it.Item, state, cli.OrDash(failover),
			fmtTime(it.LastBeginTime), fmtTime(it.LastCompleteTime), fmtTime(it.NextFireTime))
	}
	tw.Flush()
	// Each failing item's last error, whole, on its own lines: not cut
	// to a column, not quoted (control characters escaped, line by line).
	for _, it := range js.Items {
		if it.ConsecutiveFailures > 0 {
			lines := strings.Split(it.LastError, "\n")
			for i, l := range lines {
				lines[i] = printable(l)
			}
			fmt.Fprintf(w, "  item %d failing for %d runs since %s on %s; last error:\n    %s\n", it.Item, it.ConsecutiveFailures,
				fmtTime(it.FailingSince), printable(it.FailingOn), strings.Join(lines, "\n    "))
		}
	}
	if len(js.Actions) > 0 {
		fmt.Fprintln(w, "  recent operator actions:")
		for _, a := range js.Actions[:min(len(js.Actions), 5)] {
			fmt.Fprintf(w, "    %s  %s  %s\n", fmtTime(&a.Time), printable(a.Actor), printable(describeAction(a)))
		}
	}
}

// describeAction is one audit entry's "what", e.g. "pause server w1".
func describeAction(a coord.Action) string {
	what := a.Action
	switch {
	case a.Field != "":
		what += fmt.Sprintf(" %s=%q", a.Field, a.Value)
	case a.Detail != "":
		what += " " + a.Detail
	case a.Item != nil:
		what += fmt.Sprintf(" item %d", *a.Item)
	case a.Server != "":
		what += " server " + a.Server
	case a.Action == "create":
		what += " job" // recorded before entries carried their detail
	default:
		what += " every server"
	}
	return what
}

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

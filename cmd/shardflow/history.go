package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/sources/postgres"
)

// historyFlags are the flags of `shardflow history`.
type historyFlags struct {
	dsn, table, job, server string
	workflowRun             string
	item, limit             int
	since                   time.Duration
	at                      string
	asJSON                  bool
}

func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("history", stderr)
	var hf historyFlags
	secretVar(fs, &hf.dsn, "pg", "SHARDFLOW_PG", "Postgres DSN of the history database")
	fs.StringVar(&hf.table, "table", pghistory.DefaultTable, "history table, optionally SCHEMA.TABLE")
	fs.StringVar(&hf.job, "job", "", "only this job")
	fs.IntVar(&hf.item, "item", -1, "only this shard item")
	fs.StringVar(&hf.server, "server", "", "only this server id")
	fs.StringVar(&hf.workflowRun, "workflow-run", "", "only this workflow run's item runs, every step's (ids as `shardflow workflow status` lists them)")
	fs.DurationVar(&hf.since, "since", 0, "only runs that ended within this long (e.g. 1h); 0: all")
	fs.StringVar(&hf.at, "at", "", "RFC3339 instant: who owned each item then, under which epoch")
	fs.IntVar(&hf.limit, "limit", 200, "most runs printed; 0: all")
	fs.BoolVar(&hf.asJSON, "json", false, "print a JSON array of {job, server, item, epoch, source, begin, end, success, failure, error[, workflowRun]}")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if hf.dsn == "" {
		return cli.Usagef("--pg is empty; name the history database (or set SHARDFLOW_PG)")
	}
	if hf.since < 0 {
		return cli.Usagef("--since %s is negative; give a duration such as 1h", hf.since)
	}
	if hf.limit < 0 {
		return cli.Usagef("--limit %d is negative; 0 prints all runs", hf.limit)
	}
	var at time.Time
	if hf.at != "" {
		var err error
		if at, err = time.Parse(time.RFC3339, hf.at); err != nil {
			return cli.Usagef("--at %q is not an RFC3339 time such as 2026-11-23T10:00:00Z", hf.at)
		}
	}
	f := history.Filter{Job: hf.job, Server: hf.server, WorkflowRun: hf.workflowRun, Limit: hf.limit}
	if hf.item >= 0 {
		f.Item = &hf.item
	}
	if hf.since > 0 {
		f.Since = time.Now().Add(-hf.since)
	}

	pool, err := postgres.Connect(ctx, hf.dsn, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pghistory.New(pghistory.Config{Pool: pool, Table: hf.table})
	if err != nil {
		return cli.Usagef("%s", err.Error())
	}
	var recs []history.Record
	if at.IsZero() {
		recs, err = st.Runs(ctx, f)
	} else {
		recs, err = st.OwnersAt(ctx, f, at)
	}
	if err != nil {
		return err
	}
	if hf.asJSON {
		return printHistoryJSON(stdout, recs)
	}
	if at.IsZero() {
		printRuns(stdout, recs)
	} else {
		printOwners(stdout, recs, at)
	}
	return nil
}

// printHistoryJSON prints recs as a JSON array ([] when empty), times in UTC.
func printHistoryJSON(w io.Writer, recs []history.Record) error {
	if recs == nil {
		recs = []history.Record{}
	}
	for i := range recs {
		recs[i].Begin, recs[i].End = recs[i].Begin.UTC(), recs[i].End.UTC()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
}

const historyTime = "2006-01-02T15:04:05.000Z07:00"

func printRuns(w io.Writer, recs []history.Record) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no runs recorded for this selection")
		return
	}
	// The workflow run column only when a run of the selection had one.
	inWorkflow := slices.ContainsFunc(recs, func(r history.Record) bool { return r.WorkflowRun != "" })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "BEGIN\tDURATION\tJOB\tITEM\tSERVER\tEPOCH\tSOURCE\tSUCCESS\tFAILURE\tERROR"
	if inWorkflow {
		head += "\tWORKFLOW RUN"
	}
	fmt.Fprintln(tw, head)
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s", r.Begin.UTC().Format(historyTime),
			r.Duration().Round(time.Millisecond), r.Job, r.Item, r.Server, r.Epoch, r.Source, r.Success, r.Failure, oneLine(r.Error))
		if inWorkflow {
			fmt.Fprintf(tw, "\t%s", r.WorkflowRun)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

func printOwners(w io.Writer, recs []history.Record, at time.Time) {
	if len(recs) == 0 {
		fmt.Fprintf(w, "no run had begun by %s for this selection\n", at.UTC().Format(time.RFC3339))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "owners at %s\n", at.UTC().Format(time.RFC3339Nano))
	fmt.Fprintln(tw, "JOB\tITEM\tSERVER\tEPOCH\tRUN BEGIN\tRUN END\tAT THAT INSTANT")
	for _, r := range recs {
		state := "running"
		if r.End.Before(at) {
			state = "idle, last run ended " + at.Sub(r.End).Round(time.Second).String() + " before"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.Job, r.Item, r.Server, r.Epoch,
			r.Begin.UTC().Format(historyTime), r.End.UTC().Format(historyTime), state)
	}
	_ = tw.Flush()
}

// oneLine keeps a table row on one line and short.
func oneLine(s string) string {
	q := strconv.Quote(s)
	q = q[1 : len(q)-1]
	if len(q) > 80 {
		q = q[:77] + "..."
	}
	return q
}

// startHistoryRecorder records item runs in the Postgres at dsn (pghistory,
// its table migrated) for a command hosting a Node; dsn "" records nothing.
// stop flushes what is queued and closes the pool; call it after the
// Node's Stop.
func startHistoryRecorder(ctx context.Context, dsn string, logger *slog.Logger) (rec history.Recorder, stop func(), err error) {
	if dsn == "" {
		return nil, func() {}, nil
	}
	pool, err := postgres.Connect(ctx, dsn, 2)
	if err != nil {
		return nil, nil, fmt.Errorf("history database: %w", err)
	}
	buf, _, err := pghistory.NewBuffer(ctx, pghistory.Config{Pool: pool, Logger: logger}, history.BufferConfig{Logger: logger})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return buf, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := buf.Stop(sctx); err != nil {
			logger.Warn("history: flushing at stop", "err", err, "stats", buf.Stats().String())
		}
		pool.Close()
	}, nil
}

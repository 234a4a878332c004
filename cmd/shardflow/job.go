package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/redact"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runJob is `shardflow job add|list|remove`: jobs without code, stored in
// the namespace and run by `shardflow serve` workers.
func runJob(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || cli.HelpArg(args[0]) {
		return cli.GroupUsage(args, stdout, "job")
	}
	switch args[0] {
	case "add":
		return runJobAdd(ctx, args[1:], stdout, stderr)
	case "list":
		return runJobList(ctx, args[1:], stdout, stderr)
	case "remove":
		return runJobRemove(ctx, args[1:], stdout, stderr)
	}
	return cli.Usagef("unknown job subcommand %q: use job add | job list | job remove", args[0])
}

func runJobAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("job add", stderr)
	var cfg jobconfig.Config
	var headers stringList
	fs.StringVar(&cfg.JobName, "job", "", "job name (required)")
	typ := fs.String("type", "", "job type: script or http (required)")
	fs.StringVar(&cfg.Cron, "cron", "", `cron with seconds, e.g. "0/30 * * * * ?" (default: none, a one-off job run by "shardflow trigger")`)
	fs.IntVar(&cfg.ShardingTotalCount, "total", 0, "number of shard items (required)")
	fs.StringVar(&cfg.Script.CommandLine, "command", "", "script jobs: the command line run once per owned item (no shell unless it names one)")
	fs.StringVar(&cfg.HTTP.URL, "url", "", "http jobs: the URL requested once per owned item")
	fs.StringVar(&cfg.HTTP.Method, "method", "", "http jobs: the request method (default POST)")
	fs.Var(&headers, "header", `http jobs: a request header "Name: value" (repeatable)`)
	fs.DurationVar(&cfg.ItemTimeout, "timeout", 0, "per-item run timeout, e.g. 30s (default: none)")
	fs.StringVar(&cfg.ShardingItemParameters, "item-parameters", "", `item parameters, e.g. "0=eu,1=us"`)
	fs.StringVar(&cfg.JobParameter, "job-parameter", "", "the job parameter handed to every item")
	fs.BoolVar(&cfg.Failover, "failover", false, "re-run a crashed worker's running items on a live one at once")
	fs.StringVar(&cfg.Description, "description", "", "free text for operators")
	dependsOn := fs.String("depends-on", "", "jobs this job runs after, once per workflow run, e.g. extract,clean (no --cron then)")
	fs.StringVar((*string)(&cfg.UpstreamFailure), "upstream-failure", "", `with --depends-on: "stop" (default: skip this job when an upstream step failed) or "run"`)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	cfg.DependsOn = jobconfig.ParseList(*dependsOn)
	switch strings.ToLower(*typ) {
	case "script":
		cfg.JobType = jobconfig.JobTypeScript
		if cfg.HTTP.URL != "" || len(headers) > 0 || cfg.HTTP.Method != "" {
			return cli.Usagef("--url, --method and --header are for --type http")
		}
	case "http":
		cfg.JobType = jobconfig.JobTypeHTTP
		if cfg.Script.CommandLine != "" {
			return cli.Usagef("--command is for --type script")
		}
	default:
		return cli.Usagef("--type must be script or http, got %q", *typ)
	}
	if cfg.JobName == "" {
		return cli.Usagef("--job is required: name the new job")
	}
	cfg.HTTP.Headers = strings.Join(headers, "\n")
	if err := cfg.WithDefaults().Validate(); err != nil {
		return cli.Usagef("%s", err.Error())
	}
	return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
		if err := admin.CreateJob(ctx, cfg); err != nil {
			return err
		}
		when := "on cron " + cfg.Cron
		switch {
		case len(cfg.DependsOn) > 0:
			when = "once per workflow run, after " + strings.Join(cfg.DependsOn, " and ") + " completed"
		case cfg.Cron == "":
			when = "when triggered (`shardflow trigger --job " + cfg.JobName + "`)"
		}
		fmt.Fprintf(stdout, "job add: %s job %s stored in namespace %s; `shardflow serve` workers allowed to run it will, %s\n",
			cfg.JobType, cfg.JobName, cf.Namespace, when)
		return nil
	})
}

// jobRow is one line of `shardflow job list`.
type jobRow struct {
	Job     string   `json:"job"`
	Type    string   `json:"type"`
	Cron    string   `json:"cron"`
	Total   int      `json:"total"`
	Target  string   `json:"target"`
	Timeout string   `json:"itemTimeout,omitempty"`
	Servers int      `json:"liveServers"`
	Refused []string `json:"refusedBy,omitempty"`
	Error   string   `json:"configError,omitempty"`
}

func runJobList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("job list", stderr)
	asJSON := fs.Bool("json", false, "print a JSON array")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
		names, err := admin.Jobs(ctx)
		if err != nil {
			return err
		}
		rows := []jobRow{}
		for _, name := range names {
			s, err := admin.Status(ctx, name)
			if errors.Is(err, coord.ErrNoJob) {
				continue // removed meanwhile
			}
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				// Listed with its error: one broken job never hides the others.
				rows = append(rows, jobRow{Job: name, Type: "?", Error: "unreadable: " + redact.Text(err.Error())})
				continue
			}
			row := jobRow{Job: name, Type: s.Config[jobconfig.FieldJobType], Cron: s.Config[jobconfig.FieldCron], Error: s.ConfigError}
			if row.Type == "" {
				row.Type = string(jobconfig.JobTypeDataflow)
			}
			fmt.Sscan(s.Config[jobconfig.FieldShardingTotalCount], &row.Total)
			switch jobconfig.JobType(row.Type) {
			case jobconfig.JobTypeScript:
				row.Target = s.Config[jobconfig.FieldScriptCommandLine]
			case jobconfig.JobTypeHTTP:
				row.Target = strings.TrimSpace(s.Config[jobconfig.FieldHTTPMethod] + " " + s.Config[jobconfig.FieldHTTPURL])
			}
			if t := s.Config[jobconfig.FieldItemTimeout]; t != "" && t != "0s" {
				row.Timeout = t
			}
			for _, srv := range s.Servers {
				if srv.Status != "OFFLINE" {
					row.Servers++
				}
			}
			for _, r := range s.Refused {
				row.Refused = append(row.Refused, r.ID)
			}
			rows = append(rows, row)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tTYPE\tCRON\tTOTAL\tTIMEOUT\tLIVE\tREFUSED BY\tCOMMAND / URL")
		for _, r := range rows {
			target := r.Target
			if r.Error != "" {
				target = "config error: " + r.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", printable(r.Job), printable(r.Type), printable(cli.OrDash(r.Cron)), r.Total, cli.OrDash(r.Timeout),
				r.Servers, printable(cli.OrDash(strings.Join(r.Refused, ","))), printable(cli.OrDash(target)))
		}
		return tw.Flush()
	})
}

// runJobRemove shuts the job down on every server, waits for them to
// leave, then deletes it: the workers drop it at once.
func runJobRemove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("job remove", stderr)
	job := fs.String("job", "", "job name (required)")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the servers to stop the job (runs in progress finish first)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *job == "" {
		return cli.Usagef("--job is required: name the job to remove, see `shardflow job list`")
	}
	return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		for {
			live, err := liveServers(wctx, admin, *job)
			if err != nil {
				return err
			}
			if len(live) == 0 {
				if err := admin.Remove(wctx, *job, ""); err == nil {
					fmt.Fprintf(stdout, "job remove: job %s removed\n", *job)
					return nil
				} else if !strings.Contains(err.Error(), "are live") {
					return err
				}
				continue // a server joined meanwhile: shut it down too
			}
			if err := admin.Shutdown(wctx, *job, ""); err != nil && !errors.Is(err, coord.ErrNoServer) {
				return err
			}
			select {
			case <-wctx.Done():
				return fmt.Errorf("job remove: servers %v still run job %s after %s; wait for their runs or raise --wait", live, *job, *wait)
			case <-time.After(100 * time.Millisecond): // the servers' own leaving; no node to watch for all of them
			}
		}
	})
}

func liveServers(ctx context.Context, admin *coord.Admin, job string) ([]string, error) {
	s, err := admin.Status(ctx, job)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, srv := range s.Servers {
		if srv.Status != "OFFLINE" {
			live = append(live, srv.ID)
		}
	}
	return live, nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// runCron previews a cron expression: `shardflow cron next [--tz ZONE]
// [--from RFC3339] [-n N] EXPR` prints the next N fire times, one RFC 3339
// time a line, computed as the scheduler (and Quartz) computes them. An
// expression Quartz refuses exits 1 with the message naming the field.
func runCron(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "next" {
		return cli.GroupUsage(args, stdout, "cron")
	}
	fs := cli.NewFlagSet("cron next", stderr)
	tz := fs.String("tz", "", `time zone, as a job's timeZone: "Asia/Shanghai", "UTC", "GMT+08:00" (default: the local zone)`)
	from := fs.String("from", "", "start after this instant, RFC 3339 (default: now)")
	n := fs.Int("n", 5, "how many fire times, > 0")
	// Flags may come before or after the expression, which may be one
	// quoted argument or its fields as separate arguments.
	var fields []string
	for rest := args[1:]; ; {
		if err := cli.ParseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		fields = append(fields, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	expr := strings.Join(fields, " ")
	if strings.TrimSpace(expr) == "" {
		return cli.Usagef(`give the cron expression, e.g. shardflow cron next "0 15 10 ? * MON-FRI"`)
	}
	if *n <= 0 {
		return cli.Usagef("-n must be > 0 (got %d)", *n)
	}
	start := time.Now()
	if *from != "" {
		var err error
		if start, err = time.Parse(time.RFC3339, *from); err != nil {
			return cli.Usagef("--from %q is not an RFC 3339 time such as 2025-03-08T00:00:00-05:00", *from)
		}
	}
	loc, err := jobconfig.LoadZone(*tz)
	if err != nil {
		return err
	}
	times, err := jobconfig.NextFireTimes(expr, *tz, start, *n)
	if err != nil {
		return err
	}
	if len(times) == 0 {
		fmt.Fprintf(stderr, "shardflow cron next: %q never fires after %s\n", expr, start.In(loc).Format(time.RFC3339))
	}
	for _, t := range times {
		fmt.Fprintln(stdout, t.In(loc).Format(time.RFC3339))
	}
	return nil
}

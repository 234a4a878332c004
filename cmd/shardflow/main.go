// Command shardflow is the operator CLI of shardflow: the embedded demo, a
// sharding preview, job status, operator actions and a web console.
//
//	shardflow demo     [--zk HOSTS] [--namespace NS] [--job NAME] [--servers K] ...
//	shardflow shard    --strategy average|odd-even|round-robin --servers a,b,c --total N --job NAME [--json]
//	shardflow cron next [--tz ZONE] [--from RFC3339] [-n N] EXPR
//	shardflow status   --zk HOSTS [--namespace NS] [--job NAME] [--json]
//	shardflow trigger|pause|resume|disable|enable|shutdown|remove --zk HOSTS --job NAME [--server ID] [--item N]
//	shardflow config get --zk HOSTS --job NAME [FIELD]
//	shardflow config set --zk HOSTS --job NAME FIELD VALUE
//	shardflow console  --zk HOSTS [--listen ADDR]
//	shardflow history  --pg DSN [--job NAME] [--item N] [--server ID] [--since DURATION] [--at RFC3339] [--json]
//	shardflow failed   list|requeue|upgrade-v1 --pg DSN --table TABLE [--id K,...] [--error TEXT] [--all] [--json]
//	shardflow job add  --zk HOSTS --job NAME --type script|http --total N [--cron EXPR] [--command CMD | --url URL ...]
//	shardflow job list|remove --zk HOSTS [--job NAME]
//	shardflow acl      digest USER:PASSWORD | check | fix  --zk HOSTS --auth-file FILE [--operator-digest ID --worker-digest ID]
//	shardflow serve    --zk HOSTS [--server-id ID] --allow-command PREFIX... [--allow-url PREFIX...] [--http ADDR]
//	shardflow version
//
// Every command exits 0 on success, 1 on a failure it explains, and 2 on bad
// usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/cmd/shardflow/internal/demo"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run the demo job: K servers in one process (embedded store, or --zk)", demo.Run},
		{"shard", "preview a sharding assignment", runShard},
		{"cron", "preview a cron expression: cron next [--tz ZONE] [--from RFC3339] [-n N] EXPR", runCron},
		{"status", "show jobs, servers, items and counts", runStatus},
		{"trigger", "run a job now on every server that can (or on --server alone)", opCommand("trigger")},
		{"pause", "pause a job on a server (or all)", opCommand("pause")},
		{"resume", "resume a paused job", opCommand("resume")},
		{"disable", "take a server (or, with --item, a shard item) out of sharding", opCommand("disable")},
		{"enable", "undo disable", opCommand("enable")},
		{"shutdown", "stop a job on a server (or all) until restarted", opCommand("shutdown")},
		{"remove", "remove an offline server, or a whole job", opCommand("remove")},
		{"config", "get or set a job's stored config: config get [FIELD] | config set FIELD VALUE", runConfig},
		{"console", "serve the web console", runConsole},
		{"history", "show recorded runs from Postgres, or who owned each item at an instant", runHistory},
		{"failed", "failed rows of a Postgres source table: failed list | failed requeue | failed upgrade-v1", runFailed},
		{"job", "store a job without code (script, http): job add | job list | job remove", runJob},
		{"workflow", "workflow runs of jobs with dependsOn: workflow status | rerun | mark-success | skip | cancel", runWorkflow},
		{"serve", "run the stored script and HTTP jobs the allow-lists permit", runServe},
		{"acl", "ZooKeeper ACLs of the namespace: acl digest USER:PASSWORD | acl check | acl fix", runACL},
		{"version", "print the version, commit and Go version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		out, errOut := stdout, stderr
		if c.name != "demo" { // the demo redraws its table with escapes of its own
			eo, ee := newEscapeWriter(stdout), newEscapeWriter(stderr)
			defer eo.Flush()
			defer ee.Flush()
			out, errOut = eo, ee
			stderr = ee
		}
		err := c.run(ctx, args[1:], out, errOut)
		var ue cli.UsageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "shardflow %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "shardflow %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "shardflow: unknown command %q; run `shardflow help`\n", args[0])
	return 2
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: shardflow COMMAND [flags]   (shardflow COMMAND -h for its flags)")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}

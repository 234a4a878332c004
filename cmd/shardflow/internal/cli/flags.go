package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Synopses are the usage lines printed by `shardflow COMMAND -h`, by flag
// set name; every command's flags follow them.
var Synopses = map[string]string{
	"demo":                  "shardflow demo [--zk HOSTS] [--servers K] [--job NAME] [flags]",
	"shard":                 "shardflow shard --strategy average|odd-even|round-robin --servers a,b,c --total N [--job NAME] [--json]",
	"cron":                  "shardflow cron next [--tz ZONE] [--from RFC3339] [-n N] EXPR",
	"cron next":             "shardflow cron next [--tz ZONE] [--from RFC3339] [-n N] EXPR",
	"status":                "shardflow status [--job NAME] [--json] [connection flags]",
	"trigger":               "shardflow trigger --job NAME [--server ID] [connection flags]",
	"pause":                 "shardflow pause --job NAME [--server ID] [connection flags]",
	"resume":                "shardflow resume --job NAME [--server ID] [connection flags]",
	"disable":               "shardflow disable --job NAME [--server ID | --item N] [connection flags]",
	"enable":                "shardflow enable --job NAME [--server ID | --item N] [connection flags]",
	"shutdown":              "shardflow shutdown --job NAME [--server ID] [connection flags]",
	"remove":                "shardflow remove --job NAME [--server ID] [connection flags]",
	"config":                "shardflow config get --job NAME [FIELD] | shardflow config set --job NAME FIELD VALUE",
	"config get":            "shardflow config get --job NAME [FIELD] [connection flags]",
	"config set":            "shardflow config set --job NAME [connection flags] FIELD VALUE",
	"console":               "shardflow console [--listen ADDR] [--token-file FILE] [--basic-auth-file FILE] [--history-pg DSN] [connection flags]",
	"history":               "shardflow history --pg DSN [--job NAME] [--item N] [--server ID] [--workflow-run ID] [--since DURATION] [--at RFC3339] [--json]",
	"failed":                "shardflow failed list|requeue|upgrade-v1 --pg DSN --table TABLE [flags]",
	"failed list":           "shardflow failed list --pg DSN --table TABLE [--id K,...] [--error TEXT] [--json]",
	"failed requeue":        "shardflow failed requeue --pg DSN --table TABLE (--all | --id K,... | --error TEXT)",
	"failed upgrade-v1":     "shardflow failed upgrade-v1 --pg DSN --table TABLE",
	"job":                   "shardflow job add|list|remove [flags]",
	"job add":               "shardflow job add --job NAME --type script|http --total N [--cron EXPR | --depends-on JOB,...] [--command CMD | --url URL ...] [connection flags]",
	"job list":              "shardflow job list [--json] [connection flags]",
	"job remove":            "shardflow job remove --job NAME [--wait DURATION] [connection flags]",
	"workflow":              "shardflow workflow status|rerun|mark-success|skip|cancel [flags]",
	"workflow status":       "shardflow workflow status [--job NAME | --run ID] [--runs N] [--json] [connection flags]",
	"workflow rerun":        "shardflow workflow rerun --run ID --from JOB [connection flags]",
	"workflow mark-success": "shardflow workflow mark-success --run ID --job JOB [connection flags]",
	"workflow skip":         "shardflow workflow skip --run ID --job JOB [connection flags]",
	"workflow cancel":       "shardflow workflow cancel --run ID [connection flags]",
	"acl":                   "shardflow acl digest USER:PASSWORD | shardflow acl check | shardflow acl fix [connection flags]",
	"acl check":             "shardflow acl check --auth-file FILE [connection flags]",
	"acl fix":               "shardflow acl fix --auth-file FILE [connection flags]",
	"version":               "shardflow version",
	"serve":                 "shardflow serve [--server-id ID] --allow-command PREFIX... [--allow-url PREFIX...] [connection flags]",
}

// valueNames are the placeholders of flag values in usage, by flag name;
// other flags show their type (N, DURATION, TEXT).
var valueNames = map[string]string{
	"zk": "HOSTS", "namespace": "NS", "auth": "USER:PASSWORD", "job": "NAME", "server": "ID", "server-id": "ID",
	"listen": "ADDR", "token-file": "FILE", "basic-auth-file": "FILE", "history-pg": "DSN", "history-table": "TABLE",
	"pg": "DSN", "table": "TABLE", "allow-command": "PREFIX", "allow-url": "PREFIX", "header": `"NAME: VALUE"`,
	"cron": "EXPR", "command": "CMD", "url": "URL", "method": "METHOD", "tz": "ZONE", "from": "RFC3339", "at": "RFC3339",
	"strategy": "NAME", "type": "TYPE", "id": "K,...", "error": "TEXT", "run": "ID", "depends-on": "JOB,...", "workflow-run": "ID",
}

// ParseFlags parses args into fs. `-h` prints the command's usage and
// returns flag.ErrHelp (run exits 0); a bad flag is a usage error naming
// it (the flag package's own printing is silenced, so it shows once).
func ParseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printFlagUsage(out, fs)
		return err
	case err != nil:
		return Usagef("%v (`shardflow %s -h` lists the flags)", err, fs.Name())
	}
	return nil
}

// printFlagUsage prints fs's synopsis and flags, each default once: a
// flag whose text already says its default (from the environment, say)
// does not repeat it.
func printFlagUsage(w io.Writer, fs *flag.FlagSet) {
	syn, ok := Synopses[fs.Name()]
	if !ok {
		syn = "shardflow " + fs.Name() + " [flags]"
	}
	fmt.Fprintf(w, "usage: %s\n", syn)
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintln(w, "\nflags:")
			first = false
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-" // -n, -v: as the commands' docs write them
		}
		fmt.Fprintf(w, "  %s%s", dash, f.Name)
		if v := valueName(f); v != "" {
			fmt.Fprintf(w, " %s", v)
		}
		fmt.Fprintf(w, "\n        %s", f.Usage)
		if !strings.Contains(f.Usage, "default") && !zeroDefault(f) {
			if _, isString := flagGet(f).(string); isString {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
}

// valueName is the placeholder of f's value: "" for a boolean flag.
func valueName(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	if v, ok := valueNames[f.Name]; ok {
		return v
	}
	switch flagGet(f).(type) {
	case int, int64, uint, uint64:
		return "N"
	case float64:
		return "X"
	case string:
		return "TEXT"
	case time.Duration:
		return "DURATION"
	}
	return "VALUE"
}

// flagGet is f's value as the flag package's Getter gives it; nil for a
// flag.Value of this package (stringList).
func flagGet(f *flag.Flag) any {
	if g, ok := f.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// zeroDefault reports a default not worth printing: empty, 0, false.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// HelpArg reports whether arg asks for help (a group command's `-h`).
func HelpArg(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// GroupUsage answers a group command (config, job, failed, cron) given no
// subcommand or a request for help: its usage on stdout and exit 0 for
// help, a usage error otherwise.
func GroupUsage(args []string, stdout io.Writer, name string) error {
	if len(args) > 0 && HelpArg(args[0]) {
		fmt.Fprintf(stdout, "usage: %s\n(`shardflow %s SUBCOMMAND -h` lists its flags)\n", Synopses[name], name)
		return flag.ErrHelp
	}
	return Usagef("%s needs a subcommand; usage: %s", name, Synopses[name])
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// opCommand builds one operator action command.
func opCommand(action string) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs, cf := cli.ZKFlagSet(action, stderr)
		job := fs.String("job", "", "job name (required)")
		server := fs.String("server", "", "server id (default: every server of the job)")
		item := fs.Int("item", 0, "shard item 0..shardingTotalCount-1 (disable/enable only): act on one item instead of a server")
		if err := cli.ParseFlags(fs, args); err != nil {
			return err
		}
		// Whether --item was given, not its value, picks an item action:
		// `--item -1` is an item Admin refuses, never "every server".
		itemSet := false
		fs.Visit(func(f *flag.Flag) { itemSet = itemSet || f.Name == "item" })
		if !itemSet {
			*item = noItem
		}
		if *job == "" {
			return cli.Usagef("--job is required: name the job, see `shardflow status --zk ...`")
		}
		if itemSet && action != "disable" && action != "enable" {
			return cli.Usagef("--item applies only to disable and enable")
		}
		if itemSet && *server != "" {
			return cli.Usagef("--item and --server exclude each other: disable an item everywhere, or a server")
		}
		return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
			if action == "trigger" {
				asked, err := admin.TriggerServer(ctx, *job, *server)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "trigger: job %s: asked %s to run now\n", *job, describeServers(asked))
				return nil
			}
			if err := doAction(ctx, admin, action, *job, *server, *item); err != nil {
				return err
			}
			target := "every server"
			switch {
			case itemSet:
				target = fmt.Sprintf("item %d", *item)
			case *server != "":
				target = "server " + *server
			}
			if action == "remove" && *server == "" {
				target = "the whole job"
			}
			fmt.Fprintf(stdout, "%s: job %s, %s: done\n", action, *job, target)
			return nil
		})
	}
}

// noItem is doAction's item when the action is not about one item.
const noItem = math.MinInt

// doAction performs one operator action through the Admin API; item is
// noItem unless the operator named one (Admin validates it).
func doAction(ctx context.Context, admin *coord.Admin, action, job, server string, item int) error {
	switch action {
	case "trigger":
		_, err := admin.TriggerServer(ctx, job, server)
		return err
	case "pause":
		return admin.Pause(ctx, job, server)
	case "resume":
		return admin.Resume(ctx, job, server)
	case "disable":
		if item != noItem {
			return admin.DisableItem(ctx, job, item)
		}
		return admin.Disable(ctx, job, server)
	case "enable":
		if item != noItem {
			return admin.EnableItem(ctx, job, item)
		}
		return admin.Enable(ctx, job, server)
	case "shutdown":
		return admin.Shutdown(ctx, job, server)
	case "remove":
		return admin.Remove(ctx, job, server)
	}
	return cli.Usagef("unknown action %q", action)
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "get" && args[0] != "set") {
		return cli.GroupUsage(args, stdout, "config")
	}
	verb := args[0]
	fs, cf := cli.ZKFlagSet("config "+verb, stderr)
	job := fs.String("job", "", "job name (required)")
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *job == "" {
		return cli.Usagef("--job is required: name the job, see `shardflow status`")
	}
	if verb == "set" && fs.NArg() != 2 {
		return cli.Usagef("config set takes FIELD VALUE after the flags, e.g. config set --zk ... --job j cron '0/10 * * * * ?'")
	}
	if verb == "get" && fs.NArg() > 1 {
		return cli.Usagef("config get takes at most one FIELD, got %q", fs.Args())
	}
	field := fs.Arg(0)
	if verb == "get" && field != "" && !slices.Contains(jobconfig.FieldNames(), field) {
		return cli.Usagef("config get: no config field %q; the fields are %s", field, strings.Join(jobconfig.FieldNames(), ", "))
	}
	return cf.WithAdmin(ctx, func(admin *coord.Admin) error {
		if verb == "set" {
			if err := admin.SetConfig(ctx, *job, fs.Arg(0), fs.Arg(1)); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "config set: job %s: %s = %q\n", *job, fs.Arg(0), jobconfig.RedactField(fs.Arg(0), fs.Arg(1)))
			return nil
		}
		s, err := admin.Status(ctx, *job)
		if err != nil {
			return err
		}
		if field == "" {
			printConfig(stdout, s)
			return nil
		}
		v, ok := s.Config[field]
		if !ok {
			return fmt.Errorf("config get: job %s stores no %s (a job stored by an older release, or edited by hand); set it with `shardflow config set --job %s %s VALUE`", *job, field, *job, field)
		}
		fmt.Fprintln(stdout, v)
		return nil
	})
}

// describeServers is "server w1" or "servers w1, w2".
func describeServers(ids []string) string {
	if len(ids) == 1 {
		return "server " + ids[0]
	}
	return "servers " + strings.Join(ids, ", ")
}

func printConfig(w io.Writer, s coord.JobStatus) {
	keys := make([]string, 0, len(s.Config))
	for k := range s.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s=%s\n", k, printable(s.Config[k]))
	}
	if s.ConfigError != "" {
		fmt.Fprintf(w, "# error: %s\n", printable(s.ConfigError))
	}
}

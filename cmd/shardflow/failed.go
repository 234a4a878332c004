package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/sources/postgres"
)

// failedFlags are the flags of `shardflow failed list|requeue`.
type failedFlags struct {
	dsn, table, key, bookkeeping string
	ids, errText                 string
	all, asJSON                  bool
	limit                        int
}

func (f *failedFlags) register(fs *flag.FlagSet, requeue bool) {
	secretVar(fs, &f.dsn, "pg", "SHARDFLOW_PG", "Postgres DSN of the source table's database")
	fs.StringVar(&f.table, "table", "", "the source's work table, optionally SCHEMA.TABLE (required)")
	fs.StringVar(&f.key, "key", "id", "the table's key column (TableSpec.Key)")
	fs.StringVar(&f.bookkeeping, "bookkeeping", "", "renamed bookkeeping columns as in TableSpec.Bookkeeping: Status=col,LastError=col,...")
	fs.StringVar(&f.ids, "id", "", "only these keys, comma-separated")
	fs.StringVar(&f.errText, "error", "", "only rows whose last error contains this text (case-insensitive)")
	if requeue {
		fs.BoolVar(&f.all, "all", false, "requeue every failed row (without --id or --error, required)")
	} else {
		fs.IntVar(&f.limit, "limit", 200, "most rows printed; 0: all")
		fs.BoolVar(&f.asJSON, "json", false, "print a JSON array of {id, attempts, lastError, failedAt}")
	}
}

func (f *failedFlags) spec() (postgres.TableSpec, error) {
	if f.table == "" {
		return postgres.TableSpec{}, cli.Usagef("--table is required: name the source's work table")
	}
	spec := postgres.TableSpec{Table: f.table, Key: f.key}
	if f.bookkeeping == "" {
		return spec, nil
	}
	fields := map[string]*string{
		"Bucket": &spec.Bookkeeping.Bucket, "Status": &spec.Bookkeeping.Status, "ClaimedBy": &spec.Bookkeeping.ClaimedBy,
		"ClaimEpoch": &spec.Bookkeeping.ClaimEpoch, "ClaimedAt": &spec.Bookkeeping.ClaimedAt,
		"Attempts": &spec.Bookkeeping.Attempts, "LastError": &spec.Bookkeeping.LastError,
	}
	for _, kv := range strings.Split(f.bookkeeping, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		p, known := fields[k]
		if !ok || !known || v == "" {
			return spec, cli.Usagef("--bookkeeping %q: want FIELD=column pairs, FIELD one of Bucket, Status, ClaimedBy, ClaimEpoch, ClaimedAt, Attempts, LastError", kv)
		}
		*p = v
	}
	return spec, nil
}

func (f *failedFlags) filter() (postgres.FailedFilter, error) {
	flt := postgres.FailedFilter{ErrorContains: f.errText}
	for _, s := range strings.Split(f.ids, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return flt, cli.Usagef("--id %q is not an integer key", s)
		}
		flt.Keys = append(flt.Keys, id)
	}
	return flt, nil
}

// runFailed is `shardflow failed list|requeue|upgrade-v1`: the failed rows
// of a sources/postgres work table, the way back for them, and the upgrade
// of a table prepared by an earlier build.
func runFailed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || cli.HelpArg(args[0]) {
		return cli.GroupUsage(args, stdout, "failed")
	}
	if args[0] != "list" && args[0] != "requeue" && args[0] != "upgrade-v1" {
		return cli.Usagef("want `failed list`, `failed requeue` or `failed upgrade-v1` (then --pg DSN --table TABLE ...; -h for the flags)")
	}
	requeue, upgrade := args[0] == "requeue", args[0] == "upgrade-v1"
	fs := cli.NewFlagSet("failed "+args[0], stderr)
	var ff failedFlags
	ff.register(fs, requeue)
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if ff.dsn == "" {
		return cli.Usagef("--pg is empty; name the source table's database (or set SHARDFLOW_PG)")
	}
	spec, err := ff.spec()
	if err != nil {
		return err
	}
	flt, err := ff.filter()
	if err != nil {
		return err
	}
	if upgrade && (ff.all || len(flt.Keys) > 0 || flt.ErrorContains != "") {
		return cli.Usagef("upgrade-v1 takes no selection: it converts the whole table")
	}
	if requeue && ff.all == (len(flt.Keys) > 0 || flt.ErrorContains != "") {
		return cli.Usagef("requeue needs exactly one selection: --all, or --id and/or --error")
	}
	if ff.limit < 0 {
		return cli.Usagef("--limit %d is negative; 0 prints all rows", ff.limit)
	}
	pool, err := postgres.Connect(ctx, ff.dsn, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if upgrade {
		if err := postgres.RenameLegacyColumns(ctx, pool, spec); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "upgraded %s: its first-release bookkeeping columns are now the shardflow_ ones, every row kept its state\n", spec.Table)
		return nil
	}
	if requeue {
		n, err := postgres.Requeue(ctx, pool, spec, flt)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "requeued %d failed rows of %s; they are pending again and run at their shard item's next fetch\n", n, spec.Table)
		return nil
	}
	rows, err := postgres.ListFailed(ctx, pool, spec, flt, ff.limit)
	if err != nil {
		return err
	}
	if ff.asJSON {
		if rows == nil {
			rows = []postgres.FailedRow{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tATTEMPTS\tFAILED AT\tLAST ERROR")
	for _, r := range rows {
		at := "-"
		if r.FailedAt != nil {
			at = r.FailedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", r.Key, r.Attempts, at, strings.Join(strings.Fields(r.LastError), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d failed rows of %s", len(rows), spec.Table)
	if ff.limit > 0 && len(rows) == ff.limit {
		fmt.Fprintf(stdout, " (the first %d; --limit 0 for all)", ff.limit)
	}
	fmt.Fprintln(stdout)
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/sharding"
)

// runShard previews an assignment without touching any store.
func runShard(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("shard", stderr)
	strategy := fs.String("strategy", "average", "sharding strategy: average, odd-even, round-robin")
	servers := fs.String("servers", "", "comma-separated server ids, e.g. a,b,c (required)")
	total := fs.Int("total", 0, "shardingTotalCount, > 0 (required)")
	job := fs.String("job", "", "job name (odd-even and round-robin hash it) (required for those)")
	asJSON := fs.Bool("json", false, "print one JSON object mapping each server id to its sorted items")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *total <= 0 {
		return cli.Usagef("--total must be > 0 (got %d): pass the job's shardingTotalCount, e.g. --total 8", *total)
	}
	var ids []string
	for _, s := range strings.Split(*servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ids = append(ids, s)
		}
	}
	if len(ids) == 0 {
		return cli.Usagef("--servers is empty: pass server ids, e.g. --servers 10.0.0.1,10.0.0.2")
	}
	if *job == "" && *strategy != "average" {
		return cli.Usagef("--job is required for strategy %q: it hashes the job name", *strategy)
	}
	st, err := sharding.Lookup(*strategy)
	if err != nil {
		return cli.Usagef("%s", err.Error())
	}
	assignment := st.Shard(ids, *job, *total)
	if *asJSON {
		out := make(map[string][]int, len(assignment))
		for id, items := range assignment {
			if items == nil {
				items = []int{}
			}
			out[id] = items
		}
		enc := json.NewEncoder(stdout)
		return enc.Encode(out)
	}
	names := make([]string, 0, len(assignment))
	for id := range assignment {
		names = append(names, id)
	}
	// The strategies' own order, Java's String.compareTo, not Go's bytes.
	slices.SortFunc(names, sharding.CompareServerIDs)
	fmt.Fprintf(stdout, "strategy %s, job %q, %d items over %d servers\n", *strategy, *job, *total, len(names))
	for _, id := range names {
		fmt.Fprintf(stdout, "  %-20s %s\n", id, cli.JoinInts(assignment[id]))
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

// stalled fails item 1's fetch the way the trial did.
type stalled struct{}

var errStalled = errors.New(`fetch rows: can't scan into dest[1] (col: customer): cannot scan NULL into *string`)

func (stalled) Fetch(_ context.Context, s dataflow.Shard) ([]int, error) {
	if s.Item == 1 {
		return nil, errStalled
	}
	return nil, nil
}
func (stalled) Process(context.Context, dataflow.Shard, int) error { return nil }

// TestFailingItemShownEverywhere: an item whose runs fail is failing in
// `status` (its whole last error on its own line, quotes as written), in
// `status --json` (health, count, since, error) and on the console (the
// health badge, the item's state and error).
func TestFailingItemShownEverywhere(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	sess := srv.Connect()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, ServerID: "w1", Logger: cli.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := dataflow.AddJob[int](t.Context(), node, dataflow.JobConfig{JobName: "invoices", ShardingTotalCount: 2}, stalled{}); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Error(err)
		}
		_ = sess.Close()
	})
	for runs := 1; runs <= 2; runs++ {
		if err := node.TriggerLocal("invoices"); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 20*time.Second, "the run's failure counted", func() bool {
			return statusJSON(t, "--zk", "z").Jobs[0].Items[1].ConsecutiveFailures == runs
		})
	}
	js := statusJSON(t, "--zk", "z").Jobs[0]
	it := js.Items[1]
	if js.Health != coord.HealthFailing || it.FailingSince == nil || it.FailingOn != "w1" || !strings.HasSuffix(it.LastError, errStalled.Error()) {
		t.Fatalf("status --json: health %q, item 1 %+v; want failing with the whole error", js.Health, it)
	}
	if js.Items[0].ConsecutiveFailures != 0 {
		t.Fatalf("item 0 %+v; want not failing", js.Items[0])
	}
	out, errOut, code := runCLI(t, "status", "--zk", "z", "--job", "invoices")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"health failing", "item 1 failing for 2 runs since ", "\n    " + it.LastError + "\n", "COUNTS AS OF"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `\"`) {
		t.Fatalf("status output escapes quotes:\n%s", out)
	}
	_, page := buildConsole(consoleOptions{admin: coord.NewAdmin(srv.Connect(), ""), namespace: protocol.DefaultNamespace, logger: cli.Logger,
		allowedHosts: []string{"example.com"}})
	overview := get(page, "/", nil).Body.String()
	if !strings.Contains(overview, `data-health="failing"`) || !strings.Contains(overview, "item 1 failing for 2 runs") {
		t.Fatalf("console overview lacks the failing badge and its reason:\n%s", overview)
	}
	job := get(page, "/jobs/invoices", nil).Body.String()
	if !strings.Contains(job, `<span class="badge bad">failing</span> 2 runs since`) || !strings.Contains(job, "cannot scan NULL into *string") {
		t.Fatalf("console job page lacks the failing item and its error:\n%s", job)
	}
}

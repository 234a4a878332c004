package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
)

// useMemstore makes the commands connect to srv instead of ZooKeeper and
// returns the servers the last command asked for.
func useMemstore(t *testing.T, srv *memstore.Server) *[]string {
	t.Helper()
	var asked []string
	prev := cli.DialStore
	cli.DialStore = func(_ context.Context, servers []string, _ *cli.ConnFlags) (store.Store, error) {
		asked = servers
		return srv.Connect(), nil
	}
	t.Cleanup(func() { cli.DialStore = prev })
	return &asked
}

// startNode runs one Node hosting job (total items) in namespace ns on srv.
func startNode(t *testing.T, srv *memstore.Server, ns, job string, total int) {
	t.Helper()
	sess := srv.Connect()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, Namespace: ns, ServerID: "w1", Logger: cli.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := dataflow.AddJob[int](t.Context(), node, dataflow.JobConfig{JobName: job, ShardingTotalCount: total}, nopJob{}); err != nil {
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
}

func statusJSON(t *testing.T, args ...string) statusDocument {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"status", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var doc statusDocument
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return doc
}

// TestCLIRefusesReportedInputs reproduces issue 11 through the CLI: each
// refusal exits 1 naming the problem and changes nothing; shrinking the
// total 12 -> 8 -> 5 leaves items 0..4 in status.
func TestCLIRefusesReportedInputs(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNode(t, srv, "shardflow", "J", 12)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"disable", "--zk", "zk:1", "--job", "J", "--item", "-1"}, "0..11"},
		{[]string{"disable", "--zk", "zk:1", "--job", "J", "--item", "99"}, "0..11"},
		{[]string{"enable", "--zk", "zk:1", "--job", "J", "--item", "12"}, "0..11"},
		{[]string{"pause", "--zk", "zk:1", "--job", "J", "--server", "ghost"}, "no such server"},
		{[]string{"config", "set", "--zk", "zk:1", "--job", "J", "fetchDataCount", "0"}, "fetchDataCount"},
	} {
		out, errOut, code := runCLI(t, tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) || strings.Contains(out, "done") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 naming %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if _, errOut, code := runCLI(t, "pause", "--zk", "zk:1", "--job", "J", "--item", "3"); code != 2 || !strings.Contains(errOut, "--item applies only") {
		t.Errorf("pause --item: exit %d %q, want usage error", code, errOut)
	}
	js := statusJSON(t, "--zk", "zk:1").Jobs[0]
	if js.Servers[0].Disabled || js.Servers[0].Paused || js.Config["fetchDataCount"] == "0" || len(js.Items) != 12 {
		t.Fatalf("refused actions changed the job: %+v", js)
	}
	for _, it := range js.Items {
		if it.Disabled {
			t.Fatalf("item %d disabled by a refused action", it.Item)
		}
	}
	for _, total := range []string{"8", "5"} {
		if _, errOut, code := runCLI(t, "config", "set", "--zk", "zk:1", "--job", "J", "shardingTotalCount", total); code != 0 {
			t.Fatalf("config set shardingTotalCount %s: %s", total, errOut)
		}
	}
	var items []int
	for _, it := range statusJSON(t, "--zk", "zk:1").Jobs[0].Items {
		items = append(items, it.Item)
	}
	if !slices.Equal(items, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("items after 12 -> 8 -> 5: %v, want 0..4", items)
	}
	if out, errOut, code := runCLI(t, "disable", "--zk", "zk:1", "--job", "J", "--item", "4"); code != 0 || !strings.Contains(out, "item 4: done") {
		t.Fatalf("disable --item 4: exit %d %q %q", code, out, errOut)
	}
}

// TestCLIReadsEnvironment: SHARDFLOW_ZK and SHARDFLOW_NAMESPACE stand in for
// absent flags; a flag wins; with neither the error names both.
func TestCLIReadsEnvironment(t *testing.T) {
	srv := memstore.NewServer()
	asked := useMemstore(t, srv)
	startNode(t, srv, "other-ns", "E", 2)
	t.Setenv(cli.EnvZooKeeper, "")
	if _, errOut, code := runCLI(t, "status"); code != 2 || !strings.Contains(errOut, "--zk") || !strings.Contains(errOut, cli.EnvZooKeeper) {
		t.Fatalf("no --zk, no env: exit %d %q, want usage naming --zk and %s", code, errOut, cli.EnvZooKeeper)
	}
	t.Setenv(cli.EnvZooKeeper, "env-zk:2181, env-zk2:2181")
	t.Setenv(cli.EnvNamespace, "other-ns")
	doc := statusJSON(t)
	if doc.Namespace != "other-ns" || len(doc.Jobs) != 1 || doc.Jobs[0].Job != "E" {
		t.Fatalf("status from the environment: %+v", doc)
	}
	if !slices.Equal(*asked, []string{"env-zk:2181", "env-zk2:2181"}) {
		t.Fatalf("servers from %s = %v", cli.EnvZooKeeper, *asked)
	}
	doc = statusJSON(t, "--zk", "flag-zk:1", "--namespace", "shardflow")
	if doc.Namespace != "shardflow" || len(doc.Jobs) != 0 || !slices.Equal(*asked, []string{"flag-zk:1"}) {
		t.Fatalf("flags must win over the environment: namespace %q jobs %d servers %v", doc.Namespace, len(doc.Jobs), *asked)
	}
}

// TestCLIStatusText: the text status shows the next fire time with date and
// zone (derived from the cron), interval/total counts, and the recent
// operator actions.
func TestCLIStatusText(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNode(t, srv, "shardflow", "J", 4)
	for _, args := range [][]string{
		{"disable", "--zk", "z", "--job", "J", "--item", "2"},
		{"config", "set", "--zk", "z", "--job", "J", "cron", "0 0 3 * * ?"},
	} {
		if _, errOut, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: %s", args, errOut)
		}
	}
	out, errOut, code := runCLI(t, "status", "--zk", "z")
	if code != 0 {
		t.Fatalf("status: %s", errOut)
	}
	for _, want := range []string{"SUCCESS (LAST/TOTAL)", "0/0", "2     disabled", "recent operator actions:",
		`config set cron="0 0 3 * * ?"`, "disable item 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "next fire 2") {
		t.Errorf("status text lacks a dated next fire:\n%s", out)
	}
}

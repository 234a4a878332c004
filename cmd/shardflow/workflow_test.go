package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestScriptDiamondOnServe: a diamond of script jobs defined only with
// `job add --depends-on` runs on two `serve` workers when its first job
// is triggered: every item of every step once, in the workflow run the
// scripts see in SHARDFLOW_WORKFLOW_RUN, and each step after the ones it
// depends on; `workflow status` shows the run's steps succeeded;
// `workflow rerun --from c` runs c and d again in the same workflow run,
// and not a nor b.
func TestScriptDiamondOnServe(t *testing.T) {
	srv := memstore.NewServer()
	prev := cli.DialStore
	cli.DialStore = func(context.Context, []string, *cli.ConnFlags) (store.Store, error) { return srv.Connect(), nil }
	t.Cleanup(func() { cli.DialStore = prev })
	dir := t.TempDir()
	zk := []string{"--zk", "mem:1", "--namespace", "cli-diamond"}
	// Each item appends a line to its step's file; each step first checks
	// that the files of the steps it depends on are complete.
	for _, j := range []struct{ name, deps string }{{"a", ""}, {"b", "a"}, {"c", "a"}, {"d", "b,c"}} {
		check := ""
		for _, up := range strings.Split(j.deps, ",") {
			if up != "" {
				check += `test "$(wc -l < "$0/$SHARDFLOW_WORKFLOW_RUN.` + up + `")" -ge 2 || exit 3; `
			}
		}
		args := []string{"job", "add", "--job", j.name, "--type", "script", "--total", "2",
			"--command", `/bin/sh -c '` + check + `echo "$SHARDFLOW_ITEM" >> "$0/$SHARDFLOW_WORKFLOW_RUN.` + j.name + `"' ` + dir}
		if j.deps != "" {
			args = append(args, "--depends-on", j.deps)
		}
		if out, errOut, code := runCLI(t, append(args, zk...)...); code != 0 {
			t.Fatalf("job add %s: exit %d %s%s", j.name, code, out, errOut)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int, 2)
	var serveErr [2]syncBuffer
	for i, id := range []string{"w1", "w2"} {
		go func() {
			served <- run(ctx, append([]string{"serve", "--server-id", id, "--allow-command", "/bin/sh -c * *"}, zk...), &syncBuffer{}, &serveErr[i])
		}()
	}
	defer func() {
		cancel()
		for i := range 2 {
			if code := testwait.Recv(t, 30*time.Second, "serve to stop", served); code != 0 {
				t.Errorf("serve exit %d: %s", code, serveErr[i].String())
			}
		}
	}()
	testwait.For(t, 20*time.Second, "both workers on a", func() bool {
		out, _, code := runCLI(t, append([]string{"job", "list", "--json"}, zk...)...)
		var rows []jobRow
		return code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 4 && rows[0].Servers == 2 && rows[3].Servers == 2
	})
	if out, errOut, code := runCLI(t, append([]string{"trigger", "--job", "a"}, zk...)...); code != 0 {
		t.Fatalf("trigger a: exit %d %s%s", code, out, errOut)
	}
	run := workflow.RunID("a", 1)
	lines := func(job string) string {
		b, _ := os.ReadFile(filepath.Join(dir, run+"."+job))
		return string(b)
	}
	status := func() []workflow.Step {
		out, errOut, code := runCLI(t, append([]string{"workflow", "status", "--json"}, zk...)...)
		var runs []workflow.RunStatus
		if code != 0 || json.Unmarshal([]byte(out), &runs) != nil {
			t.Fatalf("workflow status: exit %d %s%s", code, out, errOut)
		}
		if len(runs) != 1 || runs[0].Run != run {
			return nil
		}
		return runs[0].Steps
	}
	succeeded := func() bool {
		steps := status()
		for _, s := range steps {
			if s.State != workflow.StateSucceeded {
				return false
			}
		}
		return len(steps) == 4
	}
	testwait.For(t, 30*time.Second, "workflow run "+run+" to succeed", succeeded)
	for _, j := range []string{"a", "b", "c", "d"} {
		if got := lines(j); len(strings.Fields(got)) != 2 || !strings.Contains(got, "0") || !strings.Contains(got, "1") {
			t.Fatalf("step %s's items in %s: %q, want 0 and 1 once each", j, run, got)
		}
	}
	out, _, _ := runCLI(t, append([]string{"workflow", "status"}, zk...)...)
	if !strings.Contains(out, run) || strings.Count(out, "succeeded") != 4 {
		t.Fatalf("workflow status:\n%s", out)
	}

	if out, errOut, code := runCLI(t, append([]string{"workflow", "rerun", "--run", run, "--from", "c"}, zk...)...); code != 0 {
		t.Fatalf("workflow rerun: exit %d %s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "c and d to run again", func() bool {
		return len(strings.Fields(lines("d"))) == 4 && succeeded()
	})
	for j, want := range map[string]int{"a": 2, "b": 2, "c": 4, "d": 4} {
		if got := len(strings.Fields(lines(j))); got != want {
			t.Errorf("after the rerun from c, %s ran %d items in %s, want %d", j, got, run, want)
		}
	}
	_, errOut, code := runCLI(t, append([]string{"workflow", "rerun", "--run", run, "--from", "x"}, zk...)...)
	if code == 0 || !strings.Contains(errOut, "x is not a job of that workflow run") {
		t.Fatalf("rerun from an unknown job: exit %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"workflow", "mark-success", "--run", run, "--job", "a"}, zk...)...)
	if code == 0 || !strings.Contains(errOut, "only a failed or stopped step can be marked succeeded") {
		t.Fatalf("mark-success of a succeeded step: exit %d %s", code, errOut)
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
	if code == 0 || !strings.Contains(errOut, "no such job") {
		t.Fatalf("rerun from an unknown job: exit %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"workflow", "mark-success", "--run", run, "--job", "a"}, zk...)...)
	if code == 0 || !strings.Contains(errOut, "only a failed or stopped step can be marked succeeded") {
		t.Fatalf("mark-success of a succeeded step: exit %d %s", code, errOut)
	}
}

// diamondJobs stores the script diamond a -> {b, c} -> d (total items
// each) with `job add` in namespace ns, and returns the connection flags.
func diamondJobs(t *testing.T, ns string, total int) []string {
	t.Helper()
	zk := []string{"--zk", "mem:1", "--namespace", ns}
	for _, j := range []struct{ name, deps string }{{"a", ""}, {"b", "a"}, {"c", "a"}, {"d", "b,c"}} {
		args := []string{"job", "add", "--job", j.name, "--type", "script", "--total", strconv.Itoa(total), "--command", "/bin/true"}
		if j.deps != "" {
			args = append(args, "--depends-on", j.deps)
		}
		if out, errOut, code := runCLI(t, append(args, zk...)...); code != 0 {
			t.Fatalf("job add %s: exit %d %s%s", j.name, code, out, errOut)
		}
	}
	return zk
}

// TestWorkflowSkipAndCancelCLI: `workflow skip` and `workflow cancel`
// say exactly what they did (the steps started, the steps cancelled and
// what they were), and refuse with the reason and exit 1, printing
// nothing on stdout, when the run's state does not allow them. The
// servers are played by workflow.Steps directly.
func TestWorkflowSkipAndCancelCLI(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	zk := diamondJobs(t, "cli-skip", 2)
	ctx := t.Context()
	st := srv.Connect()
	steps := func(job string) *workflow.Steps { return workflow.ForJob(st, "cli-skip", job) }
	pick, err := steps("a").Pick(ctx, []int{0, 1}, nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	run := pick.Run
	wf := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(append([]string{"workflow"}, args...), zk...)...)
	}
	refused := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := wf(args...)
		if code == 0 || out != "" || !strings.Contains(errOut, want) {
			t.Fatalf("workflow %v: exit %d, stdout %q, stderr %q; want a refusal saying %q", args, code, out, errOut, want)
		}
	}
	refused("it is running (0/2 items); wait for it to end, or cancel the workflow run", "skip", "--run", run, "--job", "a")
	refused("--run and --job are required", "skip", "--run", run)
	refused("--run is required", "cancel")
	refused("no such workflow run", "cancel", "--run", "a-0000000042")
	refused("no such job", "skip", "--run", run, "--job", "zz")

	out, errOut, code := wf("skip", "--run", run, "--job", "b")
	if want := "workflow skip: b's step of " + run + " is skipped (it counts as succeeded for the steps after it); no step started (the steps after it wait for other steps)\n"; code != 0 || out != want {
		t.Fatalf("skip b: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	refused("it is skipped; only a pending, failed or stopped step can be skipped", "skip", "--run", run, "--job", "b")
	if _, err := steps("a").Record(ctx, run, map[int]string{0: "", 1: ""}); err != nil {
		t.Fatal(err)
	}
	if _, err := steps("c").Record(ctx, run, map[int]string{0: "", 1: "exit status 1"}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = wf("skip", "--run", run, "--job", "c")
	if want := "; started d\n"; code != 0 || !strings.HasSuffix(out, want) {
		t.Fatalf("skip c (failed, d stopped): exit %d, stdout %q, stderr %q; want it to say it started d", code, out, errOut)
	}
	if _, err := steps("d").Record(ctx, run, map[int]string{1: ""}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = wf("cancel", "--run", run)
	if want := "workflow cancel: " + run + " cancelled: d (was running); no item or step of it starts now (items running finish, unrecorded)\n"; code != 0 || out != want {
		t.Fatalf("cancel: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	refused("every step of it is decided already (a succeeded, b skipped, c skipped, d cancelled); nothing runs to cancel", "cancel", "--run", run)
	out, _, _ = wf("status", "--run", run)
	for _, want := range []string{"skipped", "cancelled", "1/2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("workflow status shows no %q:\n%s", want, out)
		}
	}
	if a := statusJSON(t, "--zk", "z", "--namespace", "cli-skip", "--job", "a").Jobs[0].Actions[0]; a.Action != "workflow cancel" || !strings.Contains(a.Detail, "cancelled d (was running)") {
		t.Fatalf("a's audit %+v, want the cancel", a)
	}
}

// TestWorkflowMarkSuccessCLI: `workflow mark-success` says which steps it
// started, or that none did (the steps after it wait for another step),
// and its audit entry says the same; it refuses a step that did not fail.
func TestWorkflowMarkSuccessCLI(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	zk := diamondJobs(t, "cli-mark", 2)
	ctx := t.Context()
	st := srv.Connect()
	steps := func(job string) *workflow.Steps { return workflow.ForJob(st, "cli-mark", job) }
	pick, err := steps("a").Pick(ctx, []int{0, 1}, nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	run := pick.Run
	mark := func(job string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"workflow", "mark-success", "--run", run, "--job", job}, zk...)...)
	}
	for _, r := range []struct {
		job string
		out map[int]string
	}{{"a", map[int]string{0: "", 1: ""}}, {"b", map[int]string{0: "", 1: "exit status 2"}}} {
		if _, err := steps(r.job).Record(ctx, run, r.out); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := mark("b")
	if want := "workflow mark-success: b's step of " + run + " counts as succeeded; no step started (the steps after it wait for other steps)\n"; code != 0 || out != want {
		t.Fatalf("mark-success b (c running): exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if out, errOut, code := mark("b"); code == 0 || out != "" || !strings.Contains(errOut, "the step of b is succeeded; only a failed or stopped step can be marked succeeded") {
		t.Fatalf("mark-success b again: exit %d, stdout %q, stderr %q; want the refusal", code, out, errOut)
	}
	if _, err := steps("c").Record(ctx, run, map[int]string{0: "exit status 1", 1: ""}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = mark("c")
	if want := "workflow mark-success: c's step of " + run + " counts as succeeded; started d\n"; code != 0 || out != want {
		t.Fatalf("mark-success c (d stopped): exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if s, _, err := workflow.ReadStep(ctx, st, "cli-mark", "d", run); err != nil || s.State != workflow.StateRunning {
		t.Fatalf("d's step %+v, %v; want running", s, err)
	}
	acts := statusJSON(t, "--zk", "z", "--namespace", "cli-mark", "--job", "c").Jobs[0].Actions
	if len(acts) == 0 || acts[0].Action != "workflow mark-success" || !strings.HasSuffix(acts[0].Detail, "; started d") {
		t.Fatalf("c's audit %+v, want the mark-success, started d", acts)
	}
}

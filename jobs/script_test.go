package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/proctest"
	"github.com/shardflow/shardflow/internal/testwait"
)

var testShard = ShardContext{JobName: "nightly", ShardingItem: 2, ShardingTotalCount: 4, ShardingParameter: "eu",
	JobParameter: "full", Epoch: 77, ServerID: "w1", Failover: true}

func TestRunScriptEnvAndJSON(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	arg := filepath.Join(dir, "arg")
	// sh -c SCRIPT NAME: the JSON context, the last argument, is $1.
	script := fmt.Sprintf(`env | grep -E '^SHARDFLOW_(JOB|ITEM|TOTAL|ITEM_PARAMETER|JOB_PARAMETER|EPOCH|SERVER_ID|FAILOVER)=' | sort > %s; printf %%s "$1" > %s; echo done`, env, arg)
	if err := RunScript(t.Context(), []string{"/bin/sh", "-c", script, "sh"}, testShard, ScriptOptions{}); err != nil {
		t.Fatalf("RunScript: %v", err)
	}
	gotEnv, _ := os.ReadFile(env)
	want := "SHARDFLOW_EPOCH=77\nSHARDFLOW_FAILOVER=true\nSHARDFLOW_ITEM=2\nSHARDFLOW_ITEM_PARAMETER=eu\nSHARDFLOW_JOB=nightly\n" +
		"SHARDFLOW_JOB_PARAMETER=full\nSHARDFLOW_SERVER_ID=w1\nSHARDFLOW_TOTAL=4\n"
	if string(gotEnv) != want {
		t.Errorf("environment:\n%s\nwant\n%s", gotEnv, want)
	}
	raw, _ := os.ReadFile(arg)
	var got ShardContext
	if err := json.Unmarshal(raw, &got); err != nil || got != testShard {
		t.Errorf("last argument %s decodes to %+v (%v), want %+v", raw, got, err, testShard)
	}
	for _, key := range []string{`"jobName":"nightly"`, `"shardingItem":2`, `"shardingTotalCount":4`, `"shardingParameter":"eu"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("JSON %s lacks ElasticJob's %s", raw, key)
		}
	}
}

func TestRunScriptFailureCarriesTail(t *testing.T) {
	err := RunScript(t.Context(), []string{"/bin/sh", "-c", `seq 1 2000; echo "disk full" >&2; exit 3`, "sh"}, testShard, ScriptOptions{})
	if !errors.Is(err, ErrScriptFailed) || !strings.Contains(err.Error(), "exited with status 3") || !strings.Contains(err.Error(), `disk full\n`) {
		t.Fatalf("err = %v, want status 3 with the output's tail", err)
	}
	if len(err.Error()) > 3*scriptTailBytes {
		t.Errorf("error is %d bytes; the tail must bound it", len(err.Error()))
	}
	err = RunScript(t.Context(), []string{"/nonexistent/cmd"}, testShard, ScriptOptions{})
	if !errors.Is(err, ErrScriptFailed) || !strings.Contains(err.Error(), "/nonexistent/cmd") {
		t.Fatalf("missing command: %v", err)
	}
}

// TestRunScriptCancelKillsGroup: the end of the item's context (here the
// item timeout's cause) kills the script's whole process group: the
// grandchild it started in the background is gone too.
func TestRunScriptCancelKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	errc := make(chan error, 1)
	go func() {
		// The child shell starts a grandchild and waits for it.
		errc <- RunScript(ctx, []string{"/bin/sh", "-c", fmt.Sprintf(`sleep 300 & echo $! > %s.tmp; mv %s.tmp %s; wait`, pidFile, pidFile, pidFile), "sh"}, testShard, ScriptOptions{})
	}()
	pid := proctest.ReadPid(t, 20*time.Second, pidFile)
	if proctest.Gone(pid) {
		t.Fatalf("grandchild %d gone before the cancel", pid)
	}
	cancel(&dataflow.TimeoutError{After: time.Second})
	err := testwait.Recv(t, 20*time.Second, "RunScript to return after the cancel", errc)
	if !errors.Is(err, dataflow.ErrTimeout) || !strings.Contains(err.Error(), "timed out after 1s") || !strings.Contains(err.Error(), "killed by signal 9") {
		t.Errorf("err = %v, want the timeout cause and the kill", err)
	}
	testwait.For(t, 20*time.Second, fmt.Sprintf("grandchild %d killed with its group", pid), func() bool { return proctest.Gone(pid) })
}

// TestRunScriptKillsLeftovers: a command that exits leaving a background
// process in its group succeeds, and the leftover is killed (it would
// otherwise hold the output pipe and outlive the run).
func TestRunScriptKillsLeftovers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	err := RunScript(t.Context(), []string{"/bin/sh", "-c", fmt.Sprintf(`sleep 300 & echo $! > %s`, pidFile), "sh"}, testShard, ScriptOptions{})
	if err != nil {
		t.Fatalf("RunScript: %v", err)
	}
	pid := proctest.ReadPid(t, 20*time.Second, pidFile)
	testwait.For(t, 20*time.Second, fmt.Sprintf("leftover %d killed", pid), func() bool { return proctest.Gone(pid) })
}

// TestRunScriptKillsDescendantsOutsideGroup: a descendant that left the
// script's process group (setsid) and closed the output pipe is killed
// when the run ends too (it outlived the run before); one that also
// replaced its environment escapes, as documented.
func TestRunScriptKillsDescendantsOutsideGroup(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	dir := t.TempDir()
	kept, cleared := filepath.Join(dir, "kept"), filepath.Join(dir, "cleared")
	script := fmt.Sprintf(`setsid sh -c 'echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 300' </dev/null >/dev/null 2>&1 &
setsid env -i /bin/sh -c 'echo $$ > %[2]s.tmp; mv %[2]s.tmp %[2]s; exec sleep 300' </dev/null >/dev/null 2>&1 &
while [ ! -f %[1]s ] || [ ! -f %[2]s ]; do sleep 0.01; done`, kept, cleared)
	if err := RunScript(t.Context(), []string{"/bin/sh", "-c", script, "sh"}, testShard, ScriptOptions{}); err != nil {
		t.Fatalf("RunScript: %v", err)
	}
	keptPid := proctest.ReadPid(t, 20*time.Second, kept)
	clearedPid := proctest.ReadPid(t, 20*time.Second, cleared)
	t.Cleanup(func() { _ = syscall.Kill(clearedPid, syscall.SIGKILL) })
	testwait.For(t, 20*time.Second, fmt.Sprintf("descendant %d (setsid) killed with the run", keptPid), func() bool { return proctest.Gone(keptPid) })
	if proctest.Gone(clearedPid) {
		t.Errorf("descendant %d with a cleared environment is gone; the docs say it escapes", clearedPid)
	}
}

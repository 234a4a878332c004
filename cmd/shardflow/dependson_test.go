package main

import (
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
)

// TestJobAddDependsOnRefusals: `job add --depends-on` and `config set
// dependsOn` store a dependency between stored jobs and refuse, naming
// the reason, an unknown job, the job itself, a cron beside it, a cycle
// (named) and a second first job.
func TestJobAddDependsOnRefusals(t *testing.T) {
	useMemstore(t, memstore.NewServer())
	zk := []string{"--zk", "mem:1", "--namespace", "cli-deps"}
	add := func(job string, extra ...string) (string, int) {
		args := append([]string{"job", "add", "--job", job, "--type", "script", "--total", "2", "--command", "/bin/true"}, extra...)
		out, errOut, code := runCLI(t, append(args, zk...)...)
		return out + errOut, code
	}
	for _, job := range []string{"a", "x"} {
		if out, code := add(job); code != 0 {
			t.Fatalf("job add %s: exit %d %s", job, code, out)
		}
	}
	out, code := add("b", "--depends-on", "a")
	if code != 0 || !strings.Contains(out, "once per workflow run, after a completed") {
		t.Fatalf("job add b --depends-on a: exit %d %s", code, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown", []string{"c", "--depends-on", "a,nope"}, "names nope, which is not a job of namespace"},
		{"itself", []string{"c", "--depends-on", "c"}, "names the job itself (c)"},
		{"cron", []string{"c", "--depends-on", "a", "--cron", "0 * * * * ?"}, "a job runs either on a cron or after other jobs"},
		{"two roots", []string{"c", "--depends-on", "b,x"}, "would make c run after two first jobs, a and x"},
	} {
		if out, code := add(tc.args[0], tc.args[1:]...); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: job add %v: exit %d, want a refusal saying %q:\n%s", tc.name, tc.args, code, tc.want, out)
		}
	}
	// a -> b stored; a depending on b closes a cycle.
	_, errOut, code := runCLI(t, cfgArgs(zk, "set", "a", "dependsOn", "b")...)
	if code == 0 || !strings.Contains(errOut, "makes a cycle: a -> b -> a") {
		t.Fatalf("config set a dependsOn b: exit %d, want the cycle named:\n%s", code, errOut)
	}
	// An edit that is fine is stored, and the old link goes.
	if _, errOut, code := runCLI(t, cfgArgs(zk, "set", "b", "dependsOn", "x")...); code != 0 {
		t.Fatalf("config set b dependsOn x: exit %d %s", code, errOut)
	}
	out, _, _ = runCLI(t, cfgArgs(zk, "get", "b", "dependsOn")...)
	if !strings.Contains(out, "x") {
		t.Fatalf("config get b dependsOn = %q, want x", out)
	}
	// With b after x only, a is free to depend on b again.
	if _, errOut, code := runCLI(t, cfgArgs(zk, "set", "a", "dependsOn", "b")...); code != 0 {
		t.Fatalf("config set a dependsOn b after b left a: exit %d %s", code, errOut)
	}
}

// cfgArgs is `config VERB --job JOB <zk flags> rest...`.
func cfgArgs(zk []string, verb, job string, rest ...string) []string {
	return append(append([]string{"config", verb, "--job", job}, zk...), rest...)
}

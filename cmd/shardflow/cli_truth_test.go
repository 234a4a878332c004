package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
)

// startNodeAs runs one Node with server id id hosting job (total items) in
// the default namespace on srv.
func startNodeAs(t *testing.T, srv *memstore.Server, id, job string, total int) {
	t.Helper()
	sess := srv.Connect()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, ServerID: id, Logger: cli.Logger})
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

// TestCLITriggerServer: `trigger --server S` asks S alone or is refused;
// before issue 25 it was ignored and printed "server ghost: done".
func TestCLITriggerServer(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNodeAs(t, srv, "w1", "J", 4)
	startNodeAs(t, srv, "w2", "J", 4)
	zk := []string{"--zk", "z", "--job", "J"}
	out, errOut, code := runCLI(t, append([]string{"trigger", "--server", "ghost"}, zk...)...)
	if code != 1 || !strings.Contains(errOut, `"ghost"`) || !strings.Contains(errOut, "no such server") || strings.Contains(out, "done") {
		t.Fatalf("trigger --server ghost: exit %d, stdout %q, stderr %q; want exit 1 naming the server", code, out, errOut)
	}
	out, errOut, code = runCLI(t, append([]string{"trigger", "--server", "w1"}, zk...)...)
	if code != 0 || out != "trigger: job J: asked server w1 to run now\n" {
		t.Fatalf("trigger --server w1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if a := statusJSON(t, "--zk", "z").Jobs[0].Actions[0]; a.Action != "trigger" || a.Server != "w1" {
		t.Fatalf("audit %+v, want a trigger of server w1", a)
	}
	if _, errOut, code := runCLI(t, append([]string{"pause", "--server", "w2"}, zk...)...); code != 0 {
		t.Fatalf("pause w2: %s", errOut)
	}
	out, errOut, code = runCLI(t, append([]string{"trigger", "--server", "w2"}, zk...)...)
	if code != 1 || !strings.Contains(errOut, `server "w2": the server is paused; resume it first`) {
		t.Fatalf("trigger --server w2 (paused): exit %d, stdout %q, stderr %q; want a refusal saying it is paused", code, out, errOut)
	}
	out, errOut, code = runCLI(t, append([]string{"trigger"}, zk...)...)
	if code != 0 || out != "trigger: job J: asked server w1 to run now\n" {
		t.Fatalf("trigger (w2 paused): exit %d, stdout %q, stderr %q; want only w1 asked", code, out, errOut)
	}
}

// TestCLIRefusesUnknownJobAndServer: every command that names a job or a
// server refuses one that does not exist, exit 1, nothing "done".
func TestCLIRefusesUnknownJobAndServer(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNodeAs(t, srv, "w1", "J", 4)
	conn := []string{"--zk", "z", "--job", "nojob"}
	with := func(cmd []string, rest ...string) []string {
		return append(append(append([]string{}, cmd...), conn...), rest...)
	}
	noJob := [][]string{
		with([]string{"status"}), with([]string{"trigger"}), with([]string{"pause"}), with([]string{"resume"}),
		with([]string{"disable"}), with([]string{"enable"}), with([]string{"shutdown"}), with([]string{"remove"}),
		with([]string{"disable"}, "--item", "1"), with([]string{"enable"}, "--item", "1"),
		with([]string{"config", "get"}), with([]string{"config", "get"}, "cron"),
		with([]string{"config", "set"}, "cron", "0 * * * * ?"), with([]string{"job", "remove"}, "--wait", "1s"),
	}
	for _, args := range noJob {
		out, errOut, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, "no such job") || !strings.Contains(errOut, "nojob") || strings.Contains(out, "done") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 naming job nojob", args, code, out, errOut)
		}
	}
	for _, cmd := range []string{"trigger", "pause", "resume", "disable", "enable", "shutdown", "remove"} {
		out, errOut, code := runCLI(t, cmd, "--zk", "z", "--job", "J", "--server", "ghost")
		if code != 1 || !strings.Contains(errOut, "no such server") || !strings.Contains(errOut, "ghost") || strings.Contains(out, "done") {
			t.Errorf("%s --server ghost: exit %d, stdout %q, stderr %q; want exit 1 naming server ghost", cmd, code, out, errOut)
		}
	}
}

// TestCLIConfigGetField: `config get --job J FIELD` prints the field's
// value; an unknown field is a usage error listing the fields.
func TestCLIConfigGetField(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNodeAs(t, srv, "w1", "J", 4)
	out, errOut, code := runCLI(t, "config", "get", "--zk", "z", "--job", "J", "shardingTotalCount")
	if code != 0 || out != "4\n" {
		t.Fatalf("config get shardingTotalCount: exit %d, stdout %q, stderr %q; want 4", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "config", "get", "--zk", "z", "--job", "J", "shardingTotalCont")
	if code != 2 || !strings.Contains(errOut, `no config field "shardingTotalCont"`) || !strings.Contains(errOut, "shardingTotalCount") {
		t.Fatalf("config get with a misspelt field: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := runCLI(t, "config", "get", "--zk", "z", "--job", "J"); code != 0 || !strings.Contains(out, "shardingTotalCount=4\n") {
		t.Fatalf("config get: exit %d %q", code, out)
	}
}

// TestCLIHelp: `COMMAND -h` exits 0 with a usage line naming the command,
// each flag once with its value's name, a default said once, and no
// "flag: help requested"; a bad flag is one error line.
func TestCLIHelp(t *testing.T) {
	for _, args := range [][]string{
		{"demo"}, {"shard"}, {"cron"}, {"cron", "next"}, {"status"}, {"trigger"}, {"pause"}, {"resume"}, {"disable"},
		{"enable"}, {"shutdown"}, {"remove"}, {"config"}, {"config", "get"}, {"config", "set"}, {"console"}, {"history"},
		{"failed"}, {"failed", "list"}, {"failed", "requeue"}, {"failed", "upgrade-v1"}, {"job"}, {"job", "add"},
		{"job", "list"}, {"job", "remove"}, {"serve"}, {"version"}, {"acl"}, {"acl", "check"}, {"acl", "fix"},
	} {
		out, errOut, code := runCLI(t, append(args, "-h")...)
		text := out + errOut
		name := strings.Join(args, " ")
		if code != 0 || strings.Contains(text, "help requested") || !strings.Contains(text, "usage: shardflow "+name) {
			t.Errorf("%s -h: exit %d, output %q; want exit 0 with a usage line and no error", name, code, text)
			continue
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.Count(line, "default") > 1 || strings.Contains(line, "Usage of") ||
				strings.HasSuffix(line, " value") || strings.Contains(line, " shardflow trigger\n") {
				t.Errorf("%s -h: line %q renders wrong", name, line)
			}
		}
	}
	_, errOut, code := runCLI(t, "status", "--bogus")
	if code != 2 || strings.Count(errOut, "--bogus")+strings.Count(errOut, "-bogus") == 0 || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("status --bogus: exit %d %q; want exit 2 and one line naming the flag", code, errOut)
	}
	out, _, _ := runCLI(t, "job", "add", "-h")
	if !strings.Contains(out+errOut, "--cron EXPR") {
		_, errOut, _ := runCLI(t, "job", "add", "-h")
		if !strings.Contains(errOut, "--cron EXPR") {
			t.Fatalf("job add -h does not show --cron EXPR:\n%s", errOut)
		}
	}
}

// TestCLIJobAddAudit: the audit entry of `job add` says what was stored.
func TestCLIJobAddAudit(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	if _, errOut, code := runCLI(t, "job", "add", "--zk", "z", "--job", "s", "--type", "script", "--total", "3",
		"--command", "/opt/jobs/settle --fast", "--cron", "0 0 3 * * ?"); code != 0 {
		t.Fatalf("job add: %s", errOut)
	}
	out, errOut, code := runCLI(t, "status", "--zk", "z", "--job", "s")
	want := `create SCRIPT job, 3 items, cron "0 0 3 * * ?", command "/opt/jobs/settle --fast"`
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status after job add: exit %d %s\n%s; want the audit line %q", code, errOut, out, want)
	}
}

// TestCLIConsoleMessages: the refusal of a non-loopback listen gives the
// true reason (a read-only console showing every job's config), and a
// console on every interface prints an address a browser opens, not
// http://[::]:PORT.
func TestCLIConsoleMessages(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	t.Setenv(envConsoleToken, "")
	t.Setenv(envConsoleBasicAuth, "")
	_, errOut, code := runCLI(t, "console", "--zk", "z", "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(errOut, "read-only") || !strings.Contains(errOut, "stored config") || strings.Contains(errOut, "could pause") {
		t.Fatalf("console on 0.0.0.0 without credentials: exit %d %q; want the true reason", code, errOut)
	}
	t.Setenv(envConsoleToken, testToken)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--zk", "z", "--listen", "0.0.0.0:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-done; code != 0 || err != nil {
		t.Fatalf("console: exit %d, read %v", code, err)
	}
	if strings.Contains(line, "[::]") || strings.Contains(line, "0.0.0.0") || !strings.Contains(line, "http://127.0.0.1:") || !strings.Contains(line, "every interface") {
		t.Fatalf("console on 0.0.0.0 printed %q; want an address to open", line)
	}
	if u := consoleURL("http", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8899}); u != "http://127.0.0.1:8899" {
		t.Fatalf("consoleURL(127.0.0.1:8899) = %q", u)
	}
}

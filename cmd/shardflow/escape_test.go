package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
)

// TestCLIEscapesControlCharacters: control characters stored in a job
// (terminal escapes, a newline faking a row, a C1 CSI) are printed as
// \u00XX by status, config get and job list, and in error messages; they
// reached the terminal raw before.
func TestCLIEscapesControlCharacters(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	zk := []string{"--zk", "mem:1", "--namespace", "esc"}
	if _, errOut, code := runCLI(t, append([]string{"job", "add", "--job", "j", "--type", "script", "--total", "1", "--command", "/bin/true\n FAKE ROW"}, zk...)...); code != 0 {
		t.Fatalf("job add: %s", errOut)
	}
	evil := "x\x1b[2J\x1b]0;pwned\x07\nFAKE ROW \u009b31m"
	if _, errOut, code := runCLI(t, append(append([]string{"config", "set"}, zk...), "--job", "j", "description", evil)...); code != 0 {
		t.Fatalf("config set: %s", errOut)
	}
	var outputs []string
	for _, args := range [][]string{{"status"}, {"config", "get", "--job", "j"}, {"job", "list"}, {"status", "--json"}, {"job", "list", "--json"}} {
		out, errOut, code := runCLI(t, append(args, zk...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		outputs = append(outputs, out)
	}
	_, errOut, _ := runCLI(t, append([]string{"status", "--job", "no\x1b[2Jjob"}, zk...)...)
	outputs = append(outputs, errOut)
	for i, out := range outputs {
		if strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\nFAKE ROW") || strings.Contains(out, "\n FAKE ROW") {
			t.Errorf("output %d carries a raw control character or a fake row:\n%q", i, out)
		}
	}
	if !strings.Contains(outputs[0], `x\u001b[2J`) {
		t.Errorf("status does not show the escape visibly:\n%s", outputs[0])
	}
}

func TestEscapeWriterSplitC1(t *testing.T) {
	var b bytes.Buffer
	w := newEscapeWriter(&b)
	_, _ = w.Write([]byte("a\xc2"))
	_, _ = w.Write([]byte("\x9bb\xc2"))
	_, _ = w.Write([]byte("\xa9"))
	w.Flush()
	if got := b.String(); got != `a\u009bb©` {
		t.Errorf("got %q", got)
	}
}

// TestSecretFlagFromFile: --pg @FILE reads the DSN from a file, so the
// password is not in the process's arguments, and the flag never echoes
// the value.
func TestSecretFlagFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(path, []byte("postgres://app:file-pass-1@db/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := cli.NewFlagSet("t", io.Discard)
	var dsn string
	secretVar(fs, &dsn, "pg", "SHARDFLOW_TEST_UNSET_PG", "a DSN")
	if err := fs.Parse([]string{"--pg", "@" + path}); err != nil || dsn != "postgres://app:file-pass-1@db/x" {
		t.Fatalf("dsn = %q, %v", dsn, err)
	}
	if s := fs.Lookup("pg").Value.String(); strings.Contains(s, "file-pass-1") {
		t.Errorf("the flag shows its value: %q", s)
	}
	if err := fs.Parse([]string{"--pg", "@" + path + ".missing"}); err == nil {
		t.Error("a missing file was accepted")
	}
}

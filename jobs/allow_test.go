package jobs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllowListCommands: entries fix the whole command line (a prefix
// allowed any further arguments before: "find DIR -exec sh -c ..."), and
// programs are compared by their real paths (a symlink under an allowed
// directory pointing at a shell passed before).
func TestAllowListCommands(t *testing.T) {
	dir := t.TempDir()
	jobsDir := filepath.Join(dir, "jobs")
	if err := os.MkdirAll(filepath.Join(jobsDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"jobs/sync", "jobs/sub/run", "outside"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/bin/sh", filepath.Join(jobsDir, "shell")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(jobsDir, "sync"), filepath.Join(dir, "sync-link")); err != nil {
		t.Fatal(err)
	}
	find, err := exec.LookPath("find")
	if err != nil {
		t.Skip("no find in PATH")
	}
	a, err := NewAllowList([]string{
		jobsDir + "/ ...",
		dir + "/jobs/sync --full",
		dir + "/outside --region=* --dry-run",
		find + " /data -name *",
		"/bin/sh -c * sh",
		"echo",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		argv []string
		ok   bool
	}{
		{[]string{jobsDir + "/sync", "--anything"}, true}, // under the directory, "..."
		{[]string{jobsDir + "/sub/run"}, true},            // "..." allows none too
		{[]string{jobsDir + "/shell", "-c", "id"}, false}, // a symlink out of the directory
		{[]string{jobsDir + "/../outside"}, false},        // .. out of it
		{[]string{jobsDir + "/"}, false},                  // the directory itself
		{[]string{dir + "/sync-link", "--full"}, true},    // a symlink to an allowed program
		{[]string{dir + "/outside", "--region=eu", "--dry-run"}, true},
		{[]string{dir + "/outside", "--region=eu"}, false}, // a word missing
		{[]string{find, "/data", "-name", "*.csv"}, true},
		{[]string{find, "/data", "-name", "x", "-exec", "sh", "-c", "id", ";"}, false}, // arguments after a prefix
		{[]string{find, "/data"}, false},
		{[]string{"find", "/data", "-name", "x"}, true}, // a bare name, looked up in PATH
		{[]string{"/bin/sh", "-c", "echo hi", "sh"}, true},
		{[]string{"/bin/sh", "-c", "echo hi", "sh", "extra"}, false},
		{[]string{"/bin/sh", "-c", "echo hi"}, false},
		{[]string{"echo"}, true},
		{[]string{"echo", "hi"}, false},
		{[]string{"/nonexistent/echo"}, false},
	}
	for _, tt := range tests {
		err := a.CheckCommand(tt.argv)
		if (err == nil) != tt.ok {
			t.Errorf("CheckCommand(%q) = %v, want allowed=%v", tt.argv, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--allow-command")) {
			t.Errorf("CheckCommand(%q) error %v does not name the fix", tt.argv, err)
		}
	}
	real, err := a.ResolveCommand([]string{dir + "/sync-link", "--full"})
	if want, _ := filepath.EvalSymlinks(jobsDir + "/sync"); err != nil || real != want {
		t.Errorf("ResolveCommand = %q, %v; want the real path %q", real, err, want)
	}
	if err := (&AllowList{}).CheckCommand([]string{"/bin/true"}); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("empty allow-list allowed a command: %v", err)
	}
	for _, bad := range []string{"/bin/sh ... -c", "* -c", "'unterminated"} {
		if _, err := NewAllowList([]string{bad}, nil); err == nil {
			t.Errorf("NewAllowList(%q) = nil error", bad)
		}
	}
}

func TestAllowListURLs(t *testing.T) {
	a, err := NewAllowList(nil, []string{"https://jobs.internal/run/", "http://127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://jobs.internal/run/sync?x=1", true},
		{"https://jobs.internal/run", true},
		{"https://JOBS.internal/run/a", true},
		{"https://jobs.internal/runner", false},
		{"https://jobs.internal/other", false},
		{"https://jobs.internal/run/../admin", false},
		{"http://jobs.internal/run/a", false},
		{"https://jobs.internal:444/run/a", false},
		{"https://user:pw@jobs.internal/run/a", false},
		{"http://127.0.0.1:8080/anything", true},
		{"http://127.0.0.1:8081/anything", false},
		{"http://127.0.0.1/anything", false},
		{"::bad", false},
		{"https://jobs.internal/run/a;jsessionid=x", false},
		{"https://jobs.internal/run/..;/admin", false},
		{"https://jobs.internal/run/a\\..\\admin", false},
		{"https://jobs.internal/run/%2e%2e/admin", false},
		{"https://jobs.internal/run/%2E%2E%2Fadmin", false},
		{"https://jobs.internal/run/a%2fb", false},
		{"https://jobs.internal/run/a%5c..%5cadmin", false},
		{"https://jobs.internal/run/./a", false},
	}
	for _, tt := range tests {
		err := a.CheckURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("CheckURL(%q) = %v, want allowed=%v", tt.url, err, tt.ok)
		}
	}
	for _, bad := range []string{"jobs.internal/run", "ftp://x/", "/rel"} {
		if _, err := NewAllowList(nil, []string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewAllowList(url %q) = %v, want an error naming it", bad, err)
		}
	}
}

func TestTail(t *testing.T) {
	tl := newTail(5)
	_, _ = tl.Write([]byte("abc"))
	if tl.String() != "abc" {
		t.Fatalf("tail = %q", tl.String())
	}
	_, _ = tl.Write([]byte("defg"))
	if tl.String() != "...cdefg" {
		t.Fatalf("tail = %q, want ...cdefg", tl.String())
	}
	_, _ = tl.Write([]byte("0123456789"))
	if tl.String() != "...56789" {
		t.Fatalf("tail = %q, want ...56789", tl.String())
	}
}

package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestAllowListCommands(t *testing.T) {
	a, err := NewAllowList([]string{"/opt/jobs/", "/usr/bin/rsync -a", "echo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cmd string
		ok  bool
	}{
		{"/opt/jobs/sync --full", true},
		{"/opt/jobs/sub/dir/run", true},
		{"/opt/jobs/", false},
		{"/opt/jobs/../bin/sh -c id", false},
		{"/opt/jobsX/run", false},
		{"/opt/job", false},
		{"/usr/bin/rsync -a src dst", true},
		{"/usr/bin/rsync -a", true},
		{"/usr/bin/rsync --delete src dst", false},
		{"/usr/bin/rsync", false},
		{"echo hi", true},
		{"echo", true},
		{"echoes", false},
		{"/bin/sh -c 'echo hi'", false},
	}
	for _, tt := range tests {
		argv := strings.Fields(tt.cmd)
		if strings.Contains(tt.cmd, "'") {
			argv = []string{"/bin/sh", "-c", "echo hi"}
		}
		err := a.CheckCommand(argv)
		if (err == nil) != tt.ok {
			t.Errorf("CheckCommand(%q) = %v, want allowed=%v", tt.cmd, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--allow-command")) {
			t.Errorf("CheckCommand(%q) error %v does not name the fix", tt.cmd, err)
		}
	}
	if err := (&AllowList{}).CheckCommand([]string{"/bin/true"}); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("empty allow-list allowed a command: %v", err)
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
	if _, err := NewAllowList([]string{"'unterminated"}, nil); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Errorf("bad command prefix: %v", err)
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

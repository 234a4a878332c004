package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestDemoEmbeddedFinishesWithOneServerLeaving(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "--records", "24000", "--work", "3ms", "--deadline", "50s", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"server demo-3 leaves now", "all 24000 records finished", "effects: "} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	// The table's total row: success + failure = every record, and the
	// failures are exactly the records the demo fails on purpose (every 1000th).
	m := regexp.MustCompile(`(?m)^total\s+(\d+)\s+(\d+)\s*$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no total row:\n%s", out)
	}
	success, _ := strconv.Atoi(m[1])
	failure, _ := strconv.Atoi(m[2])
	if success+failure != 24000 || failure != 24 {
		t.Fatalf("total success=%d failure=%d, want 23976 and 24", success, failure)
	}
	if !strings.Contains(out, "23976 distinct, 0 duplicate") {
		t.Fatalf("effects line wrong:\n%s", out)
	}
	// The leaving server is marked and owns nothing at the end; the two others own all 8 items.
	if !regexp.MustCompile(`(?m)^demo-3\s+left\s+-\s`).MatchString(out) {
		t.Fatalf("demo-3 not shown as left with no items:\n%s", out)
	}
}

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestQuickstartDocShowsThisProgram: every Go block of docs/quickstart.md
// is a verbatim part of this program, so the doc never shows code that is
// not what `make quickstart` runs.
func TestQuickstartDocShowsThisProgram(t *testing.T) {
	doc, err := os.ReadFile("../../docs/quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/quickstart.md shows no Go block")
	}
	for _, b := range blocks {
		if !strings.Contains(string(src), string(b[1])) {
			t.Errorf("docs/quickstart.md shows code that examples/quickstart/main.go does not hold:\n%s", b[1])
		}
	}
}

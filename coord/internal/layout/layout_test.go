package layout

import (
	"strconv"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// TestRelPaths: RelServer and RelItem build the paths Join does, kept or
// not, and a kept one costs no allocation (a run asks for several).
func TestRelPaths(t *testing.T) {
	for _, c := range []struct {
		id   string
		node []string
	}{
		{"s1", nil}, {"s1", []string{NStatus}}, {"s1", []string{NRun, NLive}}, {"10.0.0.1@-@42", []string{NSharding}},
		{"s1", []string{NRun, NLive, "x"}}, {"/s1/", []string{"", NStatus}},
	} {
		want := store.Join(append([]string{NServers, c.id}, c.node...)...)[1:]
		for range 2 { // built, then kept
			if got := RelServer(c.id, c.node...); got != want {
				t.Errorf("RelServer(%q, %q) = %q, want %q", c.id, c.node, got, want)
			}
		}
	}
	for _, c := range []struct {
		item int
		node []string
	}{
		{0, nil}, {7, []string{NDisabled}}, {12345, []string{NFailover}}, {3, []string{NRunning, "a", "b"}},
	} {
		want := store.Join(append([]string{NExecution, strconv.Itoa(c.item)}, c.node...)...)[1:]
		for range 2 {
			if got := RelItem(c.item, c.node...); got != want {
				t.Errorf("RelItem(%d, %q) = %q, want %q", c.item, c.node, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = RelServer("s1", NRun, NLive)
		_ = RelServer("s1", NShutdown)
		_ = RelItem(12345, NDisabled)
	}); n != 0 {
		t.Errorf("kept paths cost %v allocations, want 0", n)
	}
}

package layout

import (
	"strings"
	"testing"
	"time"
)

// The failing items a record keeps: counted per run, grouped by state in
// the encoding, the text bounded per error and per record, round-tripped.
func TestFailingRecordEncoding(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	f := UpdateFailing(nil, []int{0, 1, 2, 3}, map[int]string{1: "e", 2: "e", 3: "x"}, t0)
	f = UpdateFailing(f, []int{0, 1, 2, 3}, map[int]string{1: "e", 2: "e"}, t0.Add(time.Second))
	if len(f) != 2 || f[1].Runs != 2 || f[1].Since != "1000000" || f[2] != f[1] {
		t.Fatalf("after two runs %+v; want items 1 and 2 failing twice since the first", f)
	}
	groups := EncodeFailing(f, []int{0, 1, 2, 3})
	if len(groups) != 1 || groups[0].Items != "1-2" || groups[0].Runs != 2 {
		t.Fatalf("groups %+v; want one group of items 1-2", groups)
	}
	back, err := DecodeFailing(groups)
	if err != nil || len(back) != 2 || back[1] != f[1] || back[2] != f[2] {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, f)
	}
	// Only the record's own items are written.
	if g := EncodeFailing(f, []int{0, 3}); len(g) != 0 {
		t.Fatalf("groups for items 0 and 3: %+v; want none", g)
	}

	long := "head " + strings.Repeat("y", 10_000) + " the cause"
	if b := BoundError(long); len(b) > MaxErrorText || !strings.HasPrefix(b, "head ") || !strings.HasSuffix(b, " the cause") {
		t.Fatalf("bounded error of %d bytes, ends %q; want at most %d keeping head and cause", len(b), b[len(b)-20:], MaxErrorText)
	}
	// Beyond the record's budget the count stays, the text is left out.
	many := map[int]string{}
	var items []int
	for i := range 100 {
		items = append(items, i)
		many[i] = strings.Repeat(string(rune('a'+i%26)), 3000) + strings.Repeat("z", i)
	}
	g := EncodeFailing(UpdateFailing(nil, items, many, t0), items)
	text, leftOut := 0, 0
	for _, x := range g {
		if x.Error == ErrorLeftOut {
			leftOut++
			continue
		}
		text += len(x.Error)
	}
	if len(g) != 100 || text > MaxFailingText || leftOut == 0 {
		t.Fatalf("%d groups, %d bytes of text, %d left out; want 100 groups within %d bytes, some left out", len(g), text, leftOut, MaxFailingText)
	}
	if _, err := DecodeFailing([]FailingJSON{{Items: "1", Runs: 0}}); err == nil {
		t.Fatal("decoded a group of 0 runs; want an error")
	}
}

// TestUpdateFailingUnchanged: a run of items none of which failed, before
// or now, leaves the failing items as they were (other items' kept), and
// a run that ends an item's failures drops it.
func TestUpdateFailingUnchanged(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	if got := UpdateFailing(nil, []int{0, 1}, nil, t0); got != nil {
		t.Errorf("no failures: %v, want nil", got)
	}
	f := UpdateFailing(nil, []int{5}, map[int]string{5: "e"}, t0)
	g := UpdateFailing(f, []int{0, 1}, nil, t0.Add(time.Second))
	if len(g) != 1 || g[5].Runs != 1 || g[5].Since != string(FormatTime(t0)) || g[5].Error != "e" {
		t.Errorf("another item's run: %v, want item 5 failing once since t0", g)
	}
	if h := UpdateFailing(g, []int{5}, nil, t0.Add(2*time.Second)); h != nil {
		t.Errorf("item 5 ran well: %v, want nil", h)
	}
	if len(g) != 1 {
		t.Errorf("the previous map changed: %v", g)
	}
}

package timeheap

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

type entry struct {
	at  time.Time
	pos int
}

// Random pushes, removals, time changes and pops keep the order and every
// entry's position right; the seed is printed and SHARDFLOW_HEAP_SEED
// replays it.
func TestHeapRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDFLOW_HEAP_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (SHARDFLOW_HEAP_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	h := New(func(e *entry) time.Time { return e.at }, func(e *entry, i int) { e.pos = i })
	base := time.Unix(0, 0)
	var in []*entry
	check := func(step int) {
		t.Helper()
		if h.Len() != len(in) {
			t.Fatalf("step %d: Len %d, want %d", step, h.Len(), len(in))
		}
		for _, e := range in {
			if e.pos < 0 || e.pos >= h.Len() || h.entries[e.pos] != e {
				t.Fatalf("step %d: an entry's position %d is wrong", step, e.pos)
			}
		}
		if len(in) > 0 {
			earliest := slices.MinFunc(in, func(a, b *entry) int { return a.at.Compare(b.at) })
			if !h.Min().at.Equal(earliest.at) {
				t.Fatalf("step %d: Min at %v, want %v", step, h.Min().at, earliest.at)
			}
		}
	}
	for step := range 5000 {
		switch op := rng.IntN(4); {
		case op == 0 || len(in) == 0:
			e := &entry{at: base.Add(time.Duration(rng.IntN(1000)) * time.Second)}
			h.Push(e)
			in = append(in, e)
		case op == 1:
			i := rng.IntN(len(in))
			e := in[i]
			if got := h.Remove(e.pos); got != e || e.pos != -1 {
				t.Fatalf("step %d: Remove returned another entry or left position %d", step, e.pos)
			}
			in = slices.Delete(in, i, i+1)
		case op == 2:
			e := in[rng.IntN(len(in))]
			e.at = base.Add(time.Duration(rng.IntN(1000)) * time.Second)
			h.Fix(e.pos)
		default:
			e := h.Remove(0)
			for _, o := range in {
				if o.at.Before(e.at) {
					t.Fatalf("step %d: removed the minimum at %v, but %v was in the heap", step, e.at, o.at)
				}
			}
			in = slices.DeleteFunc(in, func(o *entry) bool { return o == e })
		}
		check(step)
	}
	h.Clear()
	for _, e := range in {
		if e.pos != -1 {
			t.Fatalf("Clear left an entry at position %d", e.pos)
		}
	}
	if h.Len() != 0 {
		t.Fatalf("Len %d after Clear", h.Len())
	}
}

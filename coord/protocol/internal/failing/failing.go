// Package failing keeps a server's failing items of a job: the items whose
// last run on it ended in an error, as its run record carries them.
package failing

import (
	"slices"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/registration"
)

// Items are this server's items whose last run ended in an error
// (layout's failing items: the run record carries them), seeded from its
// own record at its first join, or by a run's outcome since. Safe for
// concurrent use; the zero Items has none.
type Items struct {
	mu     sync.Mutex
	items  map[int]layout.ItemFailure
	seeded bool
}

// Keep forgets the failing state of items not among items (a
// normal Begin's): an item that moved away and comes back later starts
// its count again, rather than showing a count from before.
func (f *Items) Keep(items []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for it := range f.items {
		if _, ok := slices.BinarySearch(items, it); !ok {
			delete(f.items, it)
		}
	}
}

// Of returns the job's failing items in memory, for a record of
// items (nil when none of them fails).
func (f *Items) Of(items []int) map[int]layout.ItemFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out map[int]layout.ItemFailure
	for _, it := range items {
		if fl, ok := f.items[it]; ok {
			if out == nil {
				out = map[int]layout.ItemFailure{}
			}
			out[it] = fl
		}
	}
	return out
}

// Seed takes the failing items of this server's own record, read
// at its join, unless this process already knows better (a join on a new
// session of the same process).
func (f *Items) Seed(rd registration.RunRead) {
	if !rd.Found {
		return
	}
	rec, err := layout.DecodeRunRecord(rd.Data)
	if err != nil || len(rec.Failing) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seeded {
		return
	}
	f.items, f.seeded = rec.Failing, true
}

// Note records the outcome of a run of items in memory and returns
// the failing items among them, for the run's Complete to write.
func (f *Items) Note(items []int, errs map[int]string, now time.Time) map[int]layout.ItemFailure {
	its := items // read only, as sorted
	if !slices.IsSorted(items) {
		its = slices.Sorted(slices.Values(items))
	}
	f.mu.Lock()
	f.items = layout.UpdateFailing(f.items, its, errs, now)
	f.seeded = true
	f.mu.Unlock()
	return f.Of(its)
}

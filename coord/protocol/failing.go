package protocol

import (
	"slices"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
)

// keepFailing forgets the failing state of items not among items (a
// normal Begin's): an item that moved away and comes back later starts
// its count again, rather than showing a count from before.
func (j *Job) keepFailing(items []int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for it := range j.failing {
		if _, ok := slices.BinarySearch(items, it); !ok {
			delete(j.failing, it)
		}
	}
}

// failingOf returns the job's failing items in memory, for a record of
// items (nil when none of them fails).
func (j *Job) failingOf(items []int) map[int]layout.ItemFailure {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out map[int]layout.ItemFailure
	for _, it := range items {
		if f, ok := j.failing[it]; ok {
			if out == nil {
				out = map[int]layout.ItemFailure{}
			}
			out[it] = f
		}
	}
	return out
}

// seedFailing takes the failing items of this server's own record, read
// at its join, unless this process already knows better (a join on a new
// session of the same process).
func (j *Job) seedFailing(rd runRead) {
	if !rd.found {
		return
	}
	rec, err := layout.DecodeRunRecord(rd.data)
	if err != nil || len(rec.Failing) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failingSeeded {
		return
	}
	j.failing, j.failingSeeded = rec.Failing, true
}

// noteOutcome records the outcome of a run of items in memory and returns
// the failing items among them, for the run's Complete to write.
func (j *Job) noteOutcome(items []Assignment, errs map[int]string, now time.Time) map[int]layout.ItemFailure {
	its := make([]int, len(items))
	for i, a := range items {
		its[i] = a.Item
	}
	slices.Sort(its)
	j.mu.Lock()
	j.failing = layout.UpdateFailing(j.failing, its, errs, now)
	j.failingSeeded = true
	j.mu.Unlock()
	return j.failingOf(its)
}

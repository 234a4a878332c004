package coord

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Failing items: the per-item failure state an operator sees in status
// (ItemStatus.ConsecutiveFailures, FailingSince, LastError) and that
// JobStatus.Health sums up.
//
// It lives in the server's run record (runrecord.go), the node every Begin
// and Complete of a normal run already writes in its one transaction: a
// failing item costs no write of its own, so a dropped table that fails
// every item of every server still costs each server two writes per
// trigger, not one per item. The server keeps its items' state in memory
// (job.failing), seeded at its join from its own record, so the count
// survives its restarts; Complete updates it from the run's outcome
// (RunOutcome) and writes it with the completion, Begin writes it again
// with the new record. A status read takes an item's state from the newest
// record naming the item, the same record its completion time comes from.
//
// Counted per owner: an item that moves to another server (a reshard)
// starts its count again there. A failover run's failure is not recorded
// (it writes no run record); its history record and metrics still show it.

// itemFailure is one failing item's state.
type itemFailure struct {
	// Runs is how many runs of the item in a row ended in an error.
	Runs int
	// Since is when the first of them ended (Unix milliseconds text).
	Since string
	// Error is the last failed run's error, bounded (boundError).
	Error string
}

// failingJSON is one group of items in the same state, items as ranges.
type failingJSON struct {
	Items string `json:"items"`
	Runs  int    `json:"runs"`
	Since string `json:"since"`
	Error string `json:"error"`
}

// Bounds on the error text a run record keeps: a record is read by every
// status and written at every trigger, and the store refuses a request
// beyond about 1 MB (split.go).
const (
	// maxErrorText bounds one item's error. A longer one keeps its head
	// and its end: Go errors wrap outside in, so the cause is at the end.
	maxErrorText = 4096
	errorHead    = 1024
	// maxFailingText bounds the error text of all of a record's failing
	// items together; the items beyond it keep their count and time.
	maxFailingText = 128 << 10
)

// errorLeftOut replaces the error text of items beyond maxFailingText.
const errorLeftOut = "(error text left out: a run record keeps at most 128 KiB of errors; see the item's history or the server's log)"

// boundError returns msg cut to maxErrorText, keeping its head and its end.
func boundError(msg string) string {
	if len(msg) <= maxErrorText {
		return msg
	}
	const mid = " [...] "
	tail := maxErrorText - errorHead - len(mid)
	return strings.ToValidUTF8(msg[:errorHead], "") + mid + strings.ToValidUTF8(msg[len(msg)-tail:], "")
}

// updateFailing returns prev after a run of items that ended at now, errs
// holding the error of each item whose run failed: a failed item counts
// one more run (since its first), a succeeded one is dropped. prev is not
// changed; items not in the run keep their state.
func updateFailing(prev map[int]itemFailure, items []int, errs map[int]string, now time.Time) map[int]itemFailure {
	out := maps.Clone(prev)
	if out == nil {
		out = map[int]itemFailure{}
	}
	at := string(formatTime(now))
	for _, it := range items {
		msg, failed := errs[it]
		if !failed {
			delete(out, it)
			continue
		}
		f := out[it]
		if f.Runs == 0 {
			f.Since = at
		}
		f.Runs++
		f.Error = boundError(msg)
		out[it] = f
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// encodeFailing groups the failing items among items (a record's) by
// state, in item order, the text of the groups within maxFailingText.
func encodeFailing(failing map[int]itemFailure, items []int) []failingJSON {
	var out []failingJSON
	var run []int
	var cur itemFailure
	var text string
	budget := maxFailingText
	flush := func() {
		if len(run) > 0 {
			out = append(out, failingJSON{Items: formatRanges(run), Runs: cur.Runs, Since: cur.Since, Error: text})
		}
		run = nil
	}
	for _, it := range items {
		f, ok := failing[it]
		if !ok {
			flush()
			continue
		}
		if len(run) == 0 || f != cur {
			flush()
			cur, text = f, f.Error
			if len(text) > budget {
				text = errorLeftOut
			} else {
				budget -= len(text)
			}
		}
		run = append(run, it)
	}
	flush()
	return out
}

// decodeFailing is encodeFailing's inverse.
func decodeFailing(groups []failingJSON) (map[int]itemFailure, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	out := map[int]itemFailure{}
	for _, g := range groups {
		items, err := parseRanges(g.Items)
		if err != nil {
			return nil, err
		}
		if g.Runs < 1 {
			return nil, fmt.Errorf("%w: run record: failing items %q with runs %d", errBadNodeData, g.Items, g.Runs)
		}
		for _, it := range items {
			out[it] = itemFailure{Runs: g.Runs, Since: g.Since, Error: g.Error}
		}
	}
	return out, nil
}

// keepFailing forgets the failing state of items not among items (a
// normal Begin's): an item that moved away and comes back later starts
// its count again, rather than showing a count from before.
func (j *job) keepFailing(items []int) {
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
func (j *job) failingOf(items []int) map[int]itemFailure {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out map[int]itemFailure
	for _, it := range items {
		if f, ok := j.failing[it]; ok {
			if out == nil {
				out = map[int]itemFailure{}
			}
			out[it] = f
		}
	}
	return out
}

// seedFailing takes the failing items of this server's own record, read
// at its join, unless this process already knows better (a join on a new
// session of the same process).
func (j *job) seedFailing(rd runRead) {
	if !rd.found {
		return
	}
	rec, err := decodeRunRecord(rd.data)
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
func (j *job) noteOutcome(items []Assignment, errs map[int]string, now time.Time) map[int]itemFailure {
	its := make([]int, len(items))
	for i, a := range items {
		its[i] = a.Item
	}
	slices.Sort(its)
	j.mu.Lock()
	j.failing = updateFailing(j.failing, its, errs, now)
	j.failingSeeded = true
	j.mu.Unlock()
	return j.failingOf(its)
}

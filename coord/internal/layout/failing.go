package layout

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
type ItemFailure struct {
	// Runs is how many runs of the item in a row ended in an error.
	Runs int
	// Since is when the first of them ended (Unix milliseconds text).
	Since string
	// Error is the last failed run's error, bounded (boundError).
	Error string
}

// failingJSON is one group of items in the same state, items as ranges.
type FailingJSON struct {
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
	MaxErrorText = 4096
	ErrorHead    = 1024
	// maxFailingText bounds the error text of all of a record's failing
	// items together; the items beyond it keep their count and time.
	MaxFailingText = 128 << 10
)

// errorLeftOut replaces the error text of items beyond maxFailingText.
const ErrorLeftOut = "(error text left out: a run record keeps at most 128 KiB of errors; see the item's history or the server's log)"

// boundError returns msg cut to maxErrorText, keeping its head and its end.
func BoundError(msg string) string {
	if len(msg) <= MaxErrorText {
		return msg
	}
	const mid = " [...] "
	tail := MaxErrorText - ErrorHead - len(mid)
	return strings.ToValidUTF8(msg[:ErrorHead], "") + mid + strings.ToValidUTF8(msg[len(msg)-tail:], "")
}

// updateFailing returns prev after a run of items that ended at now, errs
// holding the error of each item whose run failed: a failed item counts
// one more run (since its first), a succeeded one is dropped. prev is not
// changed; items not in the run keep their state.
func UpdateFailing(prev map[int]ItemFailure, items []int, errs map[int]string, now time.Time) map[int]ItemFailure {
	if len(errs) == 0 && !slices.ContainsFunc(items, func(it int) bool { _, ok := prev[it]; return ok }) {
		// A run of items none of which failed, before or now (every run,
		// mostly): nothing changes, and nothing is copied.
		if len(prev) == 0 {
			return nil
		}
		return prev
	}
	out := maps.Clone(prev)
	if out == nil {
		out = map[int]ItemFailure{}
	}
	at := string(FormatTime(now))
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
		f.Error = BoundError(msg)
		out[it] = f
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// encodeFailing groups the failing items among items (a record's) by
// state, in item order, the text of the groups within maxFailingText.
func EncodeFailing(failing map[int]ItemFailure, items []int) []FailingJSON {
	var out []FailingJSON
	var run []int
	var cur ItemFailure
	var text string
	budget := MaxFailingText
	flush := func() {
		if len(run) > 0 {
			out = append(out, FailingJSON{Items: FormatRanges(run), Runs: cur.Runs, Since: cur.Since, Error: text})
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
				text = ErrorLeftOut
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
func DecodeFailing(groups []FailingJSON) (map[int]ItemFailure, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	out := map[int]ItemFailure{}
	for _, g := range groups {
		items, err := ParseRanges(g.Items)
		if err != nil {
			return nil, err
		}
		if g.Runs < 1 {
			return nil, fmt.Errorf("%w: run record: failing items %q with runs %d", ErrBadNodeData, g.Items, g.Runs)
		}
		for _, it := range items {
			out[it] = ItemFailure{Runs: g.Runs, Since: g.Since, Error: g.Error}
		}
	}
	return out, nil
}

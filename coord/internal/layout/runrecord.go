package layout

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The run record: servers/{id}/run, one persistent node per server holding
// the server's last normal run (a shardflow addition to the 1.x layout),
// and its live marker servers/{id}/run/live (EPHEMERAL, on the run's
// session). Since layout 2 they are the truth of normal runs: no per-item
// node is written by a normal Begin or Complete.
//
// Begin writes the record and, when the run monitors execution, creates
// the marker in ONE transaction fenced by the version checks of the
// server's sharding node, the resharding flag and the failover directory
// (run.go, markRunning); Complete rewrites the record with the completion
// time and deletes the marker in one transaction. So a trigger costs a
// server 2 writes whatever its items; an unmonitored run's, none while its
// plan and failing items stay those of its last Begin that wrote
// (protocol's quiet.go).
//
// Readers: an item is running when a live marker's record names it (the
// leader's wait before resharding watches the markers, one per server); a
// server that went offline leaving a record without completion and without
// marker, whose sharding node is still the one the record was planned on,
// crashed mid-run: its items are queued for failover once (the record is
// marked queued in the same transaction; failover.go); a status read takes
// the items' times from the records (admin_status.go). Failover runs (rare,
// one item per claim) keep their state per item (running, the times, the
// claim and the failover mark), as before.

// recordLayout is the layout version new records carry: a server refuses
// to begin while a live server of the job has none (an older server that
// writes per-item nodes; see layoutGuard).
const RecordLayout = 2

// runRecord is the decoded data of servers/{id}/run.
type RunRecord struct {
	// Layout is recordLayout for records of this layout (0: an older one).
	Layout int
	// Items are the run's shard items, sorted.
	Items []int
	// Begin and Complete are the run's begin and completion times (Unix
	// milliseconds text); Complete is "" while the run runs. Next is the
	// next fire time Complete was given ("": none).
	Begin, Complete, Next string
	// Monitor says the run monitors execution: it created the live marker.
	Monitor bool
	// Epoch is the Mzxid of the sharding node the run was planned on.
	Epoch int64
	// Queued says the leader queued the items of this (crashed) run for
	// failover: they are queued once.
	Queued bool
	// Failing are the items of Items whose last run on this server ended in
	// an error (failing.go); nil when none.
	Failing map[int]ItemFailure
}

type RunRecordJSON struct {
	Layout   int    `json:"layout,omitempty"`
	Items    string `json:"items"`
	Begin    string `json:"begin,omitempty"`
	Complete string `json:"complete,omitempty"`
	Next     string `json:"next,omitempty"`
	Monitor  bool   `json:"monitor,omitempty"`
	Epoch    int64  `json:"epoch,omitempty"`
	Queued   bool   `json:"queued,omitempty"`
	// Failing groups the failing items by state (failing.go).
	Failing []FailingJSON `json:"failing,omitempty"`
}

// encodeRunRecord encodes r, its items as ranges ("0-3332,4000"), so a
// record of thousands of contiguous items stays a few bytes.
func EncodeRunRecord(r RunRecord) []byte {
	b, _ := json.Marshal(RunRecordJSON{Layout: r.Layout, Items: FormatRanges(r.Items), Begin: r.Begin, Complete: r.Complete,
		Next: r.Next, Monitor: r.Monitor, Epoch: r.Epoch, Queued: r.Queued, Failing: EncodeFailing(r.Failing, r.Items)})
	return b
}

// decodeRunRecord decodes a run record; an error names what is wrong.
func DecodeRunRecord(data []byte) (RunRecord, error) {
	var j RunRecordJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return RunRecord{}, fmt.Errorf("%w: run record: %v", ErrBadNodeData, err)
	}
	items, err := ParseRanges(j.Items)
	if err != nil {
		return RunRecord{}, err
	}
	failing, err := DecodeFailing(j.Failing)
	if err != nil {
		return RunRecord{}, err
	}
	return RunRecord{Layout: j.Layout, Items: items, Begin: j.Begin, Complete: j.Complete, Next: j.Next,
		Monitor: j.Monitor, Epoch: j.Epoch, Queued: j.Queued, Failing: failing}, nil
}

// formatRanges encodes sorted, distinct items as comma-separated ranges.
func FormatRanges(items []int) string {
	var b strings.Builder
	for i := 0; i < len(items); {
		k := i
		for k+1 < len(items) && items[k+1] == items[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(items[i]))
		if k > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(items[k]))
		}
		i = k + 1
	}
	return b.String()
}

// maxRangeItems bounds the items a range may expand to: a corrupted record
// must not make a reader allocate without limit.
const MaxRangeItems = 1 << 20

// parseRanges decodes formatRanges' encoding; the result is sorted and
// free of duplicates.
func ParseRanges(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b-a >= MaxRangeItems || len(out)+(b-a) >= MaxRangeItems {
			return nil, fmt.Errorf("%w: item range %q in %q is not n or n-m with 0 <= n <= m", ErrBadNodeData, part, s)
		}
		for it := a; it <= b; it++ {
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

package coord

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The run record: servers/{id}/run, one persistent node per server holding
// the server's last normal run (a shardflow addition to the 1.x layout).
//
// Begin writes it in the tail of its fenced transaction (with the status
// RUNNING), Complete rewrites it with the completion time in the tail of
// its own (with the status READY; see runRecord.Vouch for its checks). The tail is the commit point of a
// transaction split in parts (split.go): every part starts with the version
// check of servers/{id}/sharding, so the record is written only when every
// item's part was applied under the assignment the run was planned on, and
// never when a reshard came between the parts. A record therefore never
// states more than the per-item nodes do: it is a summary of one
// transaction's (or one split transaction's) writes.
//
// A status read takes the items' begin and complete times from it instead
// of reading them per item (admin_status.go): the record vouches for an
// item only when the item's container shows no change since the record was
// written (its Pzxid and Mzxid at most the record's Mzxid) and its children
// agree with the record's state, else the item's nodes are read as before.
// Failover runs write no record: they change their items' children after
// the owner's record, so the owner's record stops vouching for them.

// runRecord is the decoded data of servers/{id}/run.
type runRecord struct {
	// Items are the run's shard items, sorted.
	Items []int
	// Begin and Complete are the times Begin wrote to every item's
	// lastBeginTime and Complete to every lastCompleteTime, as stored
	// (Unix milliseconds text); Complete is "" while the run runs.
	Begin, Complete string
	// Vouch says whether a reader may take the record's times for its
	// items' (admin_status.go, vouch). Begin sets it when the run marks its
	// items running (monitorExecution). Complete sets it only when its last
	// part also checked the sharding node's and the config node's versions
	// the run began on: then no reshard, no config edit (e.g.
	// monitorExecution off, which deletes running nodes) came during the
	// run, and its running nodes held every other Begin of its items off,
	// so no other run wrote their lastBeginTime in between. Otherwise (its
	// check failed, and the completion was written without it) it is
	// false, and readers read the items' times.
	Vouch bool
	// Epoch is the Mzxid of the sharding node the run was planned on.
	Epoch int64
}

type runRecordJSON struct {
	Items    string `json:"items"`
	Begin    string `json:"begin"`
	Complete string `json:"complete,omitempty"`
	Vouch    bool   `json:"vouch"`
	Epoch    int64  `json:"epoch"`
}

// encodeRunRecord encodes r, its items as ranges ("0-3332,4000"), so a
// record of thousands of contiguous items stays a few bytes.
func encodeRunRecord(r runRecord) []byte {
	b, _ := json.Marshal(runRecordJSON{Items: formatRanges(r.Items), Begin: r.Begin, Complete: r.Complete, Vouch: r.Vouch, Epoch: r.Epoch})
	return b
}

// decodeRunRecord decodes a run record; an error names what is wrong.
func decodeRunRecord(data []byte) (runRecord, error) {
	var j runRecordJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return runRecord{}, fmt.Errorf("%w: run record: %v", errBadNodeData, err)
	}
	items, err := parseRanges(j.Items)
	if err != nil {
		return runRecord{}, err
	}
	return runRecord{Items: items, Begin: j.Begin, Complete: j.Complete, Vouch: j.Vouch, Epoch: j.Epoch}, nil
}

// formatRanges encodes sorted, distinct items as comma-separated ranges.
func formatRanges(items []int) string {
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
const maxRangeItems = 1 << 20

// parseRanges decodes formatRanges' encoding; the result is sorted and
// free of duplicates.
func parseRanges(s string) ([]int, error) {
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
		if err != nil || a < 0 || b < a || b-a >= maxRangeItems || len(out)+(b-a) >= maxRangeItems {
			return nil, fmt.Errorf("%w: item range %q in %q is not n or n-m with 0 <= n <= m", errBadNodeData, part, s)
		}
		for it := a; it <= b; it++ {
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// errBadNodeData is wrapped by the decoders below; callers add the node path.
var ErrBadNodeData = fmt.Errorf("coord: malformed node data")

// formatItems encodes shard items as the sharding node's "0,1,2".
func FormatItems(items []int) []byte {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(it))
	}
	return []byte(b.String())
}

// parseItems decodes "0,1,2" (spaces tolerated, empty = none). Items must be
// non-negative; the result is sorted and free of duplicates.
func ParseItems(data []byte) ([]int, error) {
	if out, ok := parseDigitItems(data); ok {
		return out, nil
	}
	return parseItemsText(data)
}

// parseItemsText is ParseItems for any text.
func parseItemsText(data []byte) ([]int, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: shard item %q in %q is not a non-negative integer", ErrBadNodeData, p, s)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// parseDigitItems is ParseItems for the text every reshard writes (items
// of plain digits, comma-separated, spaces tolerated), read on every run:
// one allocation, the result's. ok false for anything else (signs, other
// characters, an empty item, numbers of 18 digits or more), which
// ParseItems parses as before.
func parseDigitItems(data []byte) (out []int, ok bool) {
	d := bytes.TrimSpace(data)
	if len(d) == 0 {
		return nil, false
	}
	out = make([]int, 0, bytes.Count(d, []byte{','})+1)
	for len(d) > 0 || len(out) < cap(out) {
		field := d
		if i := bytes.IndexByte(d, ','); i >= 0 {
			field, d = d[:i], d[i+1:]
		} else {
			d = nil
		}
		field = bytes.TrimSpace(field)
		if len(field) == 0 || len(field) > 17 {
			return nil, false
		}
		n := 0
		for _, c := range field {
			if c < '0' || c > '9' {
				return nil, false
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	if !slices.IsSorted(out) {
		slices.Sort(out)
	}
	return slices.Compact(out), true
}

// formatTime encodes t as Unix milliseconds text.
func FormatTime(t time.Time) []byte { return []byte(FormatTimeText(t)) }

// FormatTimeText is FormatTime as a string (one allocation, not two: a
// run formats several times).
func FormatTimeText(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// parseTime decodes Unix milliseconds text.
func ParseTime(data []byte) (time.Time, error) {
	s := strings.TrimSpace(string(data))
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q is not Unix milliseconds", ErrBadNodeData, s)
	}
	return time.UnixMilli(ms), nil
}

// parseCount decodes a processSuccessCount/processFailureCount node; empty is 0.
func ParseCount(data []byte) (int64, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: count %q is not an integer", ErrBadNodeData, s)
	}
	return n, nil
}

// flagTrue reports whether a flag node's data means "on". Flag nodes
// (disabled, paused, shutdown) hold "true" or "false"; an empty node counts
// as on, so a node created by hand with no data works as in ElasticJob 1.x.
func FlagTrue(data []byte) bool {
	s := strings.TrimSpace(string(data))
	return s == "" || strings.EqualFold(s, "true")
}

func FlagData(on bool) []byte {
	if on {
		return []byte("true")
	}
	return []byte("false")
}

// parseItemName decodes an execution child name or a queue entry.
func ParseItemName(name string) (int, bool) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || strconv.Itoa(n) != name {
		return 0, false
	}
	return n, true
}

// sessionProblem says why a registration made on session reg cannot act
// under the store's current session sess, without contradicting itself: a
// connected session that is not the registered one is a replacement, not a
// live registration.
func SessionProblem(sess store.Session, reg int64) string {
	switch {
	case sess.State != store.StateConnected:
		return fmt.Sprintf("store session 0x%x is %s", sess.ID, sess.State)
	case sess.ID != reg:
		return fmt.Sprintf("registration on session 0x%x was lost (expired); re-registering on new session 0x%x", reg, sess.ID)
	default:
		return fmt.Sprintf("registration on session 0x%x was cancelled; waiting for re-registration", reg)
	}
}

// configCopyKey marks the config node's data as a copy of the fields
// (formatConfigCopy).
const ConfigCopyKey = "shardflowConfigFields"

// formatConfigCopy encodes the config fields as the config node's data: a
// copy written in the same transaction as the fields, so a server reads
// the whole config in one request (docs/zookeeper-layout.md, "config").
func FormatConfigCopy(fields map[string]string) []byte {
	data, err := json.Marshal(map[string]map[string]string{ConfigCopyKey: fields})
	if err != nil {
		return nil // a map of strings always encodes
	}
	return data
}

// parseConfigCopy decodes formatConfigCopy's data; false for anything
// else (empty data: no copy, read the field nodes).
func ParseConfigCopy(data []byte) (map[string]string, bool) {
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	var v map[string]map[string]string
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	fields, ok := v[ConfigCopyKey]
	return fields, ok && fields != nil
}

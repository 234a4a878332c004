package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/store"
)

// CheckItemTimes compares the begin and complete times a status shows for
// each item with the stored truth of layout 2, read directly through st:
// the newest run record naming the item (servers/{id}/run, by its Mzxid),
// unless a failover run began the item since (its
// execution/{item}/lastBeginTime written after that record), whose
// per-item times count then. Call it when no run begins or completes (the
// reads are not one snapshot); nil when every item agrees.
func CheckItemTimes(ctx context.Context, st store.Store, ns, job string, js coord.JobStatus) error {
	type rec struct {
		begin, complete string
		mzxid           int64
	}
	newest := map[int]rec{}
	servers, _, err := st.Children(ctx, store.Join(ns, job, "servers"))
	if err != nil {
		return fmt.Errorf("read servers: %w", err)
	}
	for _, s := range servers {
		p := store.Join(ns, job, "servers", s, "run")
		d, rst, err := st.Get(ctx, p)
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		var r struct {
			Items    string `json:"items"`
			Begin    string `json:"begin"`
			Complete string `json:"complete"`
		}
		if err := json.Unmarshal(d, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		items, err := expandRanges(r.Items)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, it := range items {
			if old, ok := newest[it]; !ok || old.mzxid < rst.Mzxid {
				newest[it] = rec{r.Begin, r.Complete, rst.Mzxid}
			}
		}
	}
	for _, it := range js.Items {
		read := func(node string) (*time.Time, int64, error) {
			p := store.Join(ns, job, "execution", strconv.Itoa(it.Item), node)
			d, nst, err := st.Get(ctx, p)
			if errors.Is(err, store.ErrNoNode) {
				return nil, 0, nil
			}
			if err != nil {
				return nil, 0, fmt.Errorf("read %s: %w", p, err)
			}
			return parseMillis(string(d)), nst.Mzxid, nil
		}
		fb, fbz, err := read("lastBeginTime")
		if err != nil {
			return err
		}
		fc, fcz, err := read("lastCompleteTime")
		if err != nil {
			return err
		}
		r, hasRec := newest[it.Item]
		var wantBegin, wantComplete *time.Time
		switch {
		case fb != nil && (!hasRec || fbz > r.mzxid):
			wantBegin = fb
			if fc != nil && fcz > fbz {
				wantComplete = fc
			}
		case hasRec && parseMillis(r.begin) != nil:
			wantBegin = parseMillis(r.begin)
			if r.complete != "" {
				wantComplete = parseMillis(r.complete)
			} else if fc != nil && fb != nil && fcz > fbz {
				wantComplete = fc
			}
		}
		for _, c := range []struct {
			name      string
			got, want *time.Time
		}{{"lastBeginTime", it.LastBeginTime, wantBegin}, {"lastCompleteTime", it.LastCompleteTime, wantComplete}} {
			if (c.want == nil) != (c.got == nil) || c.want != nil && !c.want.Equal(*c.got) {
				return fmt.Errorf("item %d: status shows %s %s, the records and per-item nodes hold %s", it.Item, c.name, fmtTime(c.got), fmtTime(c.want))
			}
		}
	}
	return nil
}

// parseMillis decodes Unix milliseconds text; nil when malformed.
func parseMillis(s string) *time.Time {
	ms, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return nil
	}
	t := time.UnixMilli(ms)
	return &t
}

// expandRanges decodes a record's items ("0-3,7").
func expandRanges(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// Status is the operator's status of job through h.Admin, checked against
// the stored truth by CheckItemTimes; it fails t on an error of either.
func (h *Harness) Status(t testing.TB, job string) coord.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := h.Admin.Status(ctx, job)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if err := CheckItemTimes(ctx, h.AdminStore, h.NS, job, st); err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// ItemNumbers lists the items of a status, in its order.
func ItemNumbers(st coord.JobStatus) []int {
	out := []int{}
	for _, it := range st.Items {
		out = append(out, it.Item)
	}
	return out
}

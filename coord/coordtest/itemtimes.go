package coordtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/store"
)

// CheckItemTimes compares the begin and complete times a status shows for
// each item with the item's own nodes (execution/{item}/lastBeginTime and
// lastCompleteTime), read directly through st: a status takes them from
// the servers' run records where a record vouches for them, and must show
// what the per-item nodes hold. Call it when no run begins or completes
// (the two reads are not one snapshot); nil when every item agrees.
func CheckItemTimes(ctx context.Context, st store.Store, ns, job string, js coord.JobStatus) error {
	for _, it := range js.Items {
		for _, c := range []struct {
			node string
			got  *time.Time
		}{{"lastBeginTime", it.LastBeginTime}, {"lastCompleteTime", it.LastCompleteTime}} {
			p := store.Join(ns, job, "execution", strconv.Itoa(it.Item), c.node)
			d, _, err := st.Get(ctx, p)
			var want *time.Time
			switch {
			case errors.Is(err, store.ErrNoNode):
			case err != nil:
				return fmt.Errorf("read %s: %w", p, err)
			default:
				if ms, perr := strconv.ParseInt(strings.TrimSpace(string(d)), 10, 64); perr == nil {
					t := time.UnixMilli(ms)
					want = &t
				}
			}
			if (want == nil) != (c.got == nil) || want != nil && !want.Equal(*c.got) {
				return fmt.Errorf("item %d: status shows %s %s, %s holds %s", it.Item, c.node, fmtTime(c.got), p, fmtTime(want))
			}
		}
	}
	return nil
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

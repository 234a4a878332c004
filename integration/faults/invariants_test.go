package faults

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord"
)

// checkDisjointOwnership returns nil when the sharding lists of the live
// (not OFFLINE) servers in st are pairwise disjoint and together exactly
// 0..total-1; otherwise an error naming the overlap or the gap.
func checkDisjointOwnership(st coord.JobStatus, total int) error {
	owner := map[int]string{}
	var live []string
	for _, s := range st.Servers {
		if s.Status == "OFFLINE" {
			continue
		}
		live = append(live, s.ID)
		for _, it := range s.Sharding {
			if it < 0 || it >= total {
				return fmt.Errorf("server %s owns item %d outside 0..%d", s.ID, it, total-1)
			}
			if prev, dup := owner[it]; dup {
				return fmt.Errorf("item %d owned by both %s and %s", it, prev, s.ID)
			}
			owner[it] = s.ID
		}
	}
	var missing []int
	for it := range total {
		if _, ok := owner[it]; !ok {
			missing = append(missing, it)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("items %v owned by no live server (live: %v)", missing, live)
	}
	return nil
}

// describeStatus renders servers and their sharding for failure messages.
func describeStatus(st coord.JobStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader=%q reshardingPending=%v failoverQueue=%v;", st.Leader, st.ReshardingPending, st.FailoverQueue)
	for _, s := range st.Servers {
		fmt.Fprintf(&b, " %s[%s disabled=%v paused=%v]=%v", s.ID, s.Status, s.Disabled, s.Paused, s.Sharding)
	}
	return b.String()
}

// liveServers returns the ids of the servers of st that are not OFFLINE, sorted.
func liveServers(st coord.JobStatus) []string {
	var ids []string
	for _, s := range st.Servers {
		if s.Status != "OFFLINE" {
			ids = append(ids, s.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// itemsBegunSince returns the items of 0..total-1 that some server (any,
// when servers is empty) began strictly after since, and the items not begun.
func itemsBegunSince(evs []Event, since time.Time, total int, servers ...string) (begun, missing []int) {
	seen := make([]bool, total)
	for _, e := range evs {
		if e.Ev != "begin" || e.T <= since.UnixMilli() || e.ItemNo() < 0 || e.ItemNo() >= total {
			continue
		}
		if len(servers) > 0 && !slices.Contains(servers, e.Server) {
			continue
		}
		seen[e.ItemNo()] = true
	}
	for it, ok := range seen {
		if ok {
			begun = append(begun, it)
		} else {
			missing = append(missing, it)
		}
	}
	return begun, missing
}

// allBegunSince is a waitFor condition: every item begun after since.
func allBegunSince(since time.Time, total int, servers ...string) func([]Event) bool {
	return func(evs []Event) bool {
		_, missing := itemsBegunSince(evs, since, total, servers...)
		return len(missing) == 0
	}
}

// allCommittedSince is a waitFor condition: every item has an accepted
// (fenced) commit after since, by any server: work went on, not only runs began.
func allCommittedSince(since time.Time, total int) func([]Event) bool {
	return func(evs []Event) bool {
		seen := make([]bool, total)
		n := 0
		for _, e := range evs {
			it := e.ItemNo()
			if e.Ev != "commit" || e.T <= since.UnixMilli() || it < 0 || it >= total || seen[it] {
				continue
			}
			seen[it] = true
			n++
		}
		return n == total
	}
}

// requireEveryItemRanAgain is a suite's closing liveness check: after its
// last fault healed (since), every item of 0..total-1 is begun again and
// work on it is committed (a fenced commit), by any live server: nothing is
// stuck (a failover claim no run takes, an owner skipping its item), not
// only nothing lost.
func (c *cluster) requireEveryItemRanAgain(since time.Time) {
	c.t.Helper()
	c.requireEveryItemRanAgainAfter(since, since)
}

// requireEveryItemRanAgainAfter is requireEveryItemRanAgain for a fault
// whose healing is judged later than the fault itself: every item is begun
// after fault and committed after healed. A run begun between the two (a
// restarted worker's streaming run, begun before the status poll that
// judged the cluster healed) may not begin again for as long as it streams;
// its commits after healed show the item is not stuck.
func (c *cluster) requireEveryItemRanAgainAfter(fault, healed time.Time) {
	c.t.Helper()
	c.log.waitFor(c.t, settle, "every item ran again after the last fault (begun after it, committed after it healed)", func(evs []Event) bool {
		_, missing := itemsBegunSince(evs, fault, c.total)
		return len(missing) == 0 && allCommittedSince(healed, c.total)(evs)
	})
}

// staleCommits returns every commit whose fencing check started after
// another server had printed a begin of the same item with a larger epoch,
// yet passed: the check syncs before it reads, so it must see the newer
// ownership, and passing means two servers were owners at once. The check's
// start (Event.Checked) is used, not the print time: a process paused after
// its check prints late, which is harmless here and is judged by the ledger
// (ledgerViolations), where the write itself is fenced. Timestamps have
// millisecond resolution; a check started in the same millisecond as the
// newer begin is not counted (no order is known).
func staleCommits(evs []Event) []string {
	type begin struct {
		server string
		epoch  int64
		t      int64
	}
	begins := map[int][]begin{}
	for _, e := range evs {
		if e.Ev == "begin" && e.Item != nil {
			begins[*e.Item] = append(begins[*e.Item], begin{e.Server, e.Epoch, e.T})
		}
	}
	var out []string
	for _, c := range evs {
		if c.Ev != "commit" || c.Item == nil {
			continue
		}
		for _, b := range begins[*c.Item] {
			if b.server != c.Server && b.epoch > c.Epoch && b.t < c.Checked {
				out = append(out, fmt.Sprintf("item %d: %s's fencing check of epoch %d started at %d ms and passed, after %s began epoch %d at %d ms (committed at %d ms)",
					*c.Item, c.Server, c.Epoch, c.Checked, b.server, b.epoch, b.t, c.T))
				break
			}
		}
	}
	return out
}

// percentile returns the p-th percentile (0..100, nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.5) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}

package postgres

import (
	"math"
	"sync"
	"time"
)

// cursors remember, per shard item run, the highest key fetched (with its
// bucket: the pending index's order is (key, bucket)), so the next fetch's
// index scan starts there instead of walking the index entries of rows
// already done (dead until vacuum, they make a scan from the range start
// quadratic over a drain). A fetch that finds fewer rows than asked after
// a cursor falls back to a scan from the range start, so rows that went
// back to pending behind the cursor (retries, releases, reclaims, rows
// skipped while another owner held them) are still found.
type cursors struct {
	mu        sync.Mutex
	m         map[cursorKey]position
	reclaimed map[cursorKey]time.Time // claim mode: last reclaim sweep
	checked   map[cursorKey]time.Time // claim mode: last ownership check
}

type cursorKey struct {
	job         string
	item, total int
	epoch       int64
}

type position struct {
	bucket int16
	key    int64
}

var start = position{bucket: -1, key: math.MinInt64}

func (p position) atStart() bool { return p == start }

func (c *cursors) get(k cursorKey) position {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.m[k]; ok {
		return p
	}
	return start
}

// advance moves k's cursor to the position of the highest of keys (both
// modes read in key order).
func (c *cursors) advance(k cursorKey, keys []int64) {
	if len(keys) == 0 {
		return
	}
	p := start
	for _, key := range keys {
		if key > p.key {
			p = position{bucket: int16(bucketOf(key)), key: key}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cursorKey]position{}
	}
	// Runs end and epochs change: keep the map from growing without bound.
	if len(c.m) > 4096 {
		clear(c.m)
	}
	c.m[k] = p
}

// reset sends k's next fetch back to the range start.
func (c *cursors) reset(k cursorKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// reclaimDue reports whether k's claim fetch should sweep abandoned
// claims: on a scan from the range start (the first fetch of a run, and
// whenever a fetch came back short), and otherwise every interval. It
// records the sweep as done when it says yes.
func (c *cursors) reclaimDue(k cursorKey, fromStart bool, now time.Time, interval time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reclaimed == nil {
		c.reclaimed = map[cursorKey]time.Time{}
	}
	if !fromStart && now.Sub(c.reclaimed[k]) < interval {
		return false
	}
	if len(c.reclaimed) > 4096 {
		clear(c.reclaimed)
	}
	c.reclaimed[k] = now
	return true
}

// ownershipDue reports whether k's claim fetch should check ownership with
// the coordinator: on its first fetch, then every interval. It records the
// check when it says yes.
func (c *cursors) ownershipDue(k cursorKey, now time.Time, interval time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checked == nil {
		c.checked = map[cursorKey]time.Time{}
	}
	if last, ok := c.checked[k]; ok && now.Sub(last) < interval {
		return false
	}
	if len(c.checked) > 4096 {
		clear(c.checked)
	}
	c.checked[k] = now
	return true
}

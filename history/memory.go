package history

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is an in-process Recorder and Reader keeping the newest records
// up to a limit: the embedded demo's history and a test double. All methods
// are safe for concurrent use.
type Memory struct {
	limit int

	mu   sync.Mutex
	recs []Record // in arrival order
}

// NewMemory returns a Memory keeping at most limit records (<= 0: 10000);
// older ones are forgotten first.
func NewMemory(limit int) *Memory {
	if limit <= 0 {
		limit = 10000
	}
	return &Memory{limit: limit}
}

// Record keeps recs.
func (m *Memory) Record(recs ...Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, recs...)
	if over := len(m.recs) - m.limit; over > 0 {
		m.recs = slices.Clone(m.recs[over:])
	}
}

// All returns every kept record in arrival order.
func (m *Memory) All() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.recs)
}

// Runs implements Reader.
func (m *Memory) Runs(_ context.Context, f Filter) ([]Record, error) {
	var out []Record
	for _, r := range m.All() {
		if f.Match(r) {
			out = append(out, r)
		}
	}
	sortNewestFirst(out)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// OwnersAt implements Reader.
func (m *Memory) OwnersAt(_ context.Context, f Filter, at time.Time) ([]Record, error) {
	type key struct {
		job  string
		item int
	}
	latest := map[key]Record{}
	sel := Filter{Job: f.Job, Item: f.Item}
	for _, r := range m.All() {
		if !sel.Match(r) || r.Begin.After(at) {
			continue
		}
		k := key{r.Job, r.Item}
		if cur, ok := latest[k]; !ok || r.Begin.After(cur.Begin) {
			latest[k] = r
		}
	}
	var out []Record
	for _, r := range latest {
		if f.Server == "" || r.Server == f.Server {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Item, b.Item))
	})
	return out, nil
}

// sortNewestFirst orders recs by Begin, latest first (then job, item and
// server, so the order is stable).
func sortNewestFirst(recs []Record) {
	slices.SortFunc(recs, func(a, b Record) int {
		return cmp.Or(b.Begin.Compare(a.Begin), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Item, b.Item), cmp.Compare(a.Server, b.Server))
	})
}

var (
	_ Recorder = (*Memory)(nil)
	_ Reader   = (*Memory)(nil)
)

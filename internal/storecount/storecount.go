// Package storecount counts the requests a coordination store is sent, to
// measure what the protocol costs (docs/benchmarks.md: TestJoinCost, the
// scale tests, make bench-coord).
package storecount

import (
	"context"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/store"
)

// Store is a store.Store decorator that counts requests, to measure
// the coordination cost of the protocol (docs/benchmarks.md). Safe for
// concurrent use; it adds no goroutines and forwards every call unchanged.
type Store struct {
	store.Store
	reads, writes, multis, multiOps, syncs atomic.Int64
	// replies counts requests that returned, with or without an error: a
	// caller's sign of progress (coordtest's stall bound).
	replies atomic.Int64
}

// New wraps st.
func New(st store.Store) *Store { return &Store{Store: st} }

// Counts is a snapshot of a Store's counters.
type Counts struct {
	// Reads counts Get, GetW, Exists, ExistsW, Children and ChildrenW.
	Reads int64
	// Writes counts write requests: Create, Set, Delete, and each Multi once.
	Writes int64
	// Multis counts Multi requests; MultiOps the operations inside them.
	Multis, MultiOps int64
	// Syncs counts Sync requests.
	Syncs int64
}

// Requests is the total number of requests sent.
func (c Counts) Requests() int64 { return c.Reads + c.Writes + c.Syncs }

// Sub returns c - o, for the cost of an interval.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Reads: c.Reads - o.Reads, Writes: c.Writes - o.Writes, Multis: c.Multis - o.Multis, MultiOps: c.MultiOps - o.MultiOps, Syncs: c.Syncs - o.Syncs}
}

// Replies is the number of requests that returned so far, whatever
// their outcome. A caller that waits on the store without a deadline of its
// own reads it to tell a slow store (replies keep coming) from a stalled
// one.
func (s *Store) Replies() int64 { return s.replies.Load() }

// Counts returns the counters so far.
func (s *Store) Counts() Counts {
	return Counts{Reads: s.reads.Load(), Writes: s.writes.Load(), Multis: s.multis.Load(), MultiOps: s.multiOps.Load(), Syncs: s.syncs.Load()}
}

// Create counts a write.
func (s *Store) Create(ctx context.Context, path string, data []byte, mode store.Mode) (string, error) {
	defer s.replies.Add(1)
	s.writes.Add(1)
	return s.Store.Create(ctx, path, data, mode)
}

// Get counts a read.
func (s *Store) Get(ctx context.Context, path string) ([]byte, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.Get(ctx, path)
}

// GetW counts a read.
func (s *Store) GetW(ctx context.Context, path string) ([]byte, store.Stat, <-chan store.Event, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.GetW(ctx, path)
}

// Exists counts a read.
func (s *Store) Exists(ctx context.Context, path string) (bool, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.Exists(ctx, path)
}

// ExistsW counts a read.
func (s *Store) ExistsW(ctx context.Context, path string) (bool, store.Stat, <-chan store.Event, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.ExistsW(ctx, path)
}

// Children counts a read.
func (s *Store) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.Children(ctx, path)
}

// ChildrenW counts a read.
func (s *Store) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, <-chan store.Event, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.ChildrenW(ctx, path)
}

// GetWFunc counts a read; it forwards store.FuncWatcher (see
// ForwardsFuncWatches).
func (s *Store) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.(store.FuncWatcher).GetWFunc(ctx, path, fn)
}

// ExistsWFunc counts a read; it forwards store.FuncWatcher.
func (s *Store) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.(store.FuncWatcher).ExistsWFunc(ctx, path, fn)
}

// ChildrenWFunc counts a read; it forwards store.FuncWatcher.
func (s *Store) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
	defer s.replies.Add(1)
	s.reads.Add(1)
	return s.Store.(store.FuncWatcher).ChildrenWFunc(ctx, path, fn)
}

// ForwardsFuncWatches reports whether the wrapped store implements
// store.FuncWatcher, which the ...WFunc methods forward
// (store.FuncWatchForwarder).
func (s *Store) ForwardsFuncWatches() bool { return store.FuncWatcherOf(s.Store) != nil }

// Set counts a write.
func (s *Store) Set(ctx context.Context, path string, data []byte, version int32) (store.Stat, error) {
	defer s.replies.Add(1)
	s.writes.Add(1)
	return s.Store.Set(ctx, path, data, version)
}

// Delete counts a write.
func (s *Store) Delete(ctx context.Context, path string, version int32) error {
	defer s.replies.Add(1)
	s.writes.Add(1)
	return s.Store.Delete(ctx, path, version)
}

// MaxRequestBytes forwards the wrapped store's request limit
// (store.RequestLimiter), so that coord splits as it would without the
// decorator.
func (s *Store) MaxRequestBytes() int { return store.RequestLimit(s.Store) }

// Multi counts one write request and its operations.
func (s *Store) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	defer s.replies.Add(1)
	s.writes.Add(1)
	s.multis.Add(1)
	s.multiOps.Add(int64(len(ops)))
	return s.Store.Multi(ctx, ops...)
}

// Sync counts a sync.
func (s *Store) Sync(ctx context.Context, path string) error {
	defer s.replies.Add(1)
	s.syncs.Add(1)
	return s.Store.Sync(ctx, path)
}

package treecache

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/store"
)

// watchID names one armed watch of the cache (0: none).
type watchID = uint64

// watchIDs numbers the caches' watches, process-wide.
var watchIDs atomic.Uint64

// WatchRef names one armed watch of a cache, in the event its owner hands
// back to Handle.
type WatchRef struct {
	// Rel is the watched node, relative to the cache's root.
	Rel  string
	kind watchKind
	id   watchID
}

// cacheStore is the tree cache's view of the store: reads go to the store,
// and the W calls arm watches (through w) whose events go to deliver with
// the watch's name (WatchRef) instead of returning a channel. deliver is
// called on the store's dispatch goroutine and must not block (the job
// queues the event).
type cacheStore struct {
	store.Store
	w       store.FuncWatcher
	root    string
	deliver func(WatchRef, store.Event)
}

// abs is the absolute path of rel, a path under the cache's root.
func (s *cacheStore) abs(rel string) string { return store.Join(s.root, rel) }

func (s *cacheStore) ref(path string, k watchKind) (WatchRef, store.WatchFunc) {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, s.root), "/")
	r := WatchRef{Rel: rel, kind: k, id: watchIDs.Add(1)}
	return r, func(ev store.Event) { s.deliver(r, ev) }
}

// GetW reads path and arms a data watch delivered to the owner.
func (s *cacheStore) GetW(ctx context.Context, path string) ([]byte, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchData)
	data, st, err := s.w.GetWFunc(ctx, path, fn)
	if err != nil {
		return nil, store.Stat{}, 0, err
	}
	return data, st, r.id, nil
}

// ExistsW reads path's existence and arms a data watch delivered to the
// owner.
func (s *cacheStore) ExistsW(ctx context.Context, path string) (bool, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchData)
	ok, st, err := s.w.ExistsWFunc(ctx, path, fn)
	if err != nil {
		return false, store.Stat{}, 0, err
	}
	return ok, st, r.id, nil
}

// ChildrenW lists path's children and arms a children watch delivered to
// the owner.
func (s *cacheStore) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchChildren)
	names, st, err := s.w.ChildrenWFunc(ctx, path, fn)
	if err != nil {
		return nil, store.Stat{}, 0, err
	}
	return names, st, r.id, nil
}

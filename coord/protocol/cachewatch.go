package protocol

import (
	"context"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
)

// watchID names one armed watch of the cache (0: none).
type watchID = uint64

// watchRef names one armed watch of the cache, in the event delivered to
// its owner.
type watchRef struct {
	rel  string
	kind watchKind
	id   watchID
}

// cacheStore is the tree cache's view of the store: reads go to the store,
// and the W calls arm watches whose events go to deliver with the watch's
// name (watchRef) instead of returning a channel. deliver is called on the
// store's dispatch goroutine and must not block (the job queues the event).
type cacheStore struct {
	store.Store
	w       *watchFuncs
	root    string
	deliver func(watchRef, store.Event)
}

func (s *cacheStore) ref(path string, k watchKind) (watchRef, store.WatchFunc) {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, s.root), "/")
	r := watchRef{rel: rel, kind: k, id: newWatchID()}
	return r, func(ev store.Event) { s.deliver(r, ev) }
}

// GetW reads path and arms a data watch delivered to the owner.
func (s *cacheStore) GetW(ctx context.Context, path string) ([]byte, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchData)
	data, st, err := s.w.getW(ctx, path, fn)
	if err != nil {
		return nil, store.Stat{}, 0, err
	}
	return data, st, r.id, nil
}

// ExistsW reads path's existence and arms a data watch delivered to the
// owner.
func (s *cacheStore) ExistsW(ctx context.Context, path string) (bool, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchData)
	ok, st, err := s.w.existsW(ctx, path, fn)
	if err != nil {
		return false, store.Stat{}, 0, err
	}
	return ok, st, r.id, nil
}

// ChildrenW lists path's children and arms a children watch delivered to
// the owner.
func (s *cacheStore) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, watchID, error) {
	r, fn := s.ref(path, watchChildren)
	names, st, err := s.w.childrenW(ctx, path, fn)
	if err != nil {
		return nil, store.Stat{}, 0, err
	}
	return names, st, r.id, nil
}

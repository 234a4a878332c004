package coordtest

import (
	"context"
	"slices"
	"sync"

	"github.com/shardflow/shardflow/coord/store"
)

// Call is one store call as a HookStore's hooks see it.
type Call struct {
	// Method is the store method: "Create", "Get", "GetW", "Children",
	// "ChildrenW", "Exists", "ExistsW" or "Multi".
	Method string
	// Path is the call's path ("" for Multi).
	Path string
	// Ops are Multi's operations.
	Ops []store.Op
}

// Checks reports whether c is a Multi with a version check of path: a
// Begin's transaction checks the server's sharding node, the one point
// inside a Begin every run passes (it plans on the tree cache and reads
// nothing directly in the steady state).
func (c Call) Checks(path string) bool {
	return c.Method == "Multi" && slices.ContainsFunc(c.Ops, func(op store.Op) bool {
		ck, ok := op.(*store.CheckOp)
		return ok && ck.Path == path
	})
}

// HookStore wraps a store so that a test can act around its calls, at the
// points of the protocol where an order of events is to be forced: Before
// runs before a call reaches the store and may hold it, or fail it without
// making it (a connection lost on the way there); After runs once the call
// has returned and may hold the reply, or replace its error (a reply lost
// on the way back). The hooked calls are Create, Get, GetW, Children,
// ChildrenW, Exists, ExistsW and Multi; the others go straight to the store.
//
// Set the hooks before the store is used (a server's goroutines call it
// from its start); they run on the goroutine of the call, and a hook that
// holds a call should also return when ctx ends. OnNext arms a one-shot
// hook at any time.
type HookStore struct {
	store.Store
	// Before, when set, runs before each hooked call; a non-nil error is
	// returned without making the call.
	Before func(ctx context.Context, c Call) error
	// After, when set, runs after each hooked call with the call's error and
	// returns the error the caller gets: err to keep the call's outcome.
	// Any other error replaces it, and the call's results are dropped.
	After func(ctx context.Context, c Call, err error) error

	mu    sync.Mutex
	armed []armedHook // OnNext's, in arming order
}

// armedHook is a hook OnNext armed.
type armedHook struct {
	method, path string
	f            func()
}

// OnNext arms f to run once, before Before, ahead of the next call of
// method on path (of any path when path is ""), on that call's goroutine:
// a point inside the protocol (Begin's read of an assignment, a
// transaction) where a test acts. It replaces a hook armed for the same
// method and path that has not run yet.
func (s *HookStore) OnNext(method, path string, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = slices.DeleteFunc(s.armed, func(a armedHook) bool { return a.method == method && a.path == path })
	s.armed = append(s.armed, armedHook{method, path, f})
}

// takeArmed removes and returns the first hook armed for c, or nil.
func (s *HookStore) takeArmed(c Call) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.armed {
		if a.method == c.Method && (a.path == "" || a.path == c.Path) {
			s.armed = slices.Delete(s.armed, i, i+1)
			return a.f
		}
	}
	return nil
}

// hook makes one call through s's hooks.
func hook[R any](s *HookStore, ctx context.Context, c Call, call func() (R, error)) (R, error) {
	var zero R
	if f := s.takeArmed(c); f != nil {
		f()
	}
	if s.Before != nil {
		if err := s.Before(ctx, c); err != nil {
			return zero, err
		}
	}
	r, err := call()
	if s.After != nil {
		if aerr := s.After(ctx, c, err); aerr != err {
			return zero, aerr
		}
	}
	return r, err
}

// MaxRequestBytes forwards the wrapped store's request limit
// (store.RequestLimiter), which the embedded interface would hide.
func (s *HookStore) MaxRequestBytes() int { return store.RequestLimit(s.Store) }

// Create runs the hooks around the wrapped store's Create.
func (s *HookStore) Create(ctx context.Context, path string, data []byte, mode store.Mode) (string, error) {
	return hook(s, ctx, Call{Method: "Create", Path: path}, func() (string, error) {
		return s.Store.Create(ctx, path, data, mode)
	})
}

// nodeRead is what a Get or Children returns besides its error.
type nodeRead[T any] struct {
	v     T
	stat  store.Stat
	watch <-chan store.Event
}

// Get runs the hooks around the wrapped store's Get.
func (s *HookStore) Get(ctx context.Context, path string) ([]byte, store.Stat, error) {
	r, err := hook(s, ctx, Call{Method: "Get", Path: path}, func() (nodeRead[[]byte], error) {
		data, stat, err := s.Store.Get(ctx, path)
		return nodeRead[[]byte]{v: data, stat: stat}, err
	})
	return r.v, r.stat, err
}

// Children runs the hooks around the wrapped store's Children.
func (s *HookStore) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	r, err := hook(s, ctx, Call{Method: "Children", Path: path}, func() (nodeRead[[]string], error) {
		names, stat, err := s.Store.Children(ctx, path)
		return nodeRead[[]string]{v: names, stat: stat}, err
	})
	return r.v, r.stat, err
}

// GetW runs the hooks around the wrapped store's GetW (the tree cache's
// reads of the nodes whose data it keeps: the config, the flags).
func (s *HookStore) GetW(ctx context.Context, path string) ([]byte, store.Stat, <-chan store.Event, error) {
	r, err := hook(s, ctx, Call{Method: "GetW", Path: path}, func() (nodeRead[[]byte], error) {
		data, stat, watch, err := s.Store.GetW(ctx, path)
		return nodeRead[[]byte]{v: data, stat: stat, watch: watch}, err
	})
	return r.v, r.stat, r.watch, err
}

// ChildrenW runs the hooks around the wrapped store's ChildrenW.
func (s *HookStore) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, <-chan store.Event, error) {
	r, err := hook(s, ctx, Call{Method: "ChildrenW", Path: path}, func() (nodeRead[[]string], error) {
		names, stat, watch, err := s.Store.ChildrenW(ctx, path)
		return nodeRead[[]string]{v: names, stat: stat, watch: watch}, err
	})
	return r.v, r.stat, r.watch, err
}

// Exists runs the hooks around the wrapped store's Exists (Begin's direct
// reads of item flags the cache has not loaded).
func (s *HookStore) Exists(ctx context.Context, path string) (bool, store.Stat, error) {
	r, err := hook(s, ctx, Call{Method: "Exists", Path: path}, func() (nodeRead[bool], error) {
		ok, stat, err := s.Store.Exists(ctx, path)
		return nodeRead[bool]{v: ok, stat: stat}, err
	})
	return r.v, r.stat, err
}

// ExistsW runs the hooks around the wrapped store's ExistsW (the tree
// cache's reads of item flags).
func (s *HookStore) ExistsW(ctx context.Context, path string) (bool, store.Stat, <-chan store.Event, error) {
	r, err := hook(s, ctx, Call{Method: "ExistsW", Path: path}, func() (nodeRead[bool], error) {
		ok, stat, watch, err := s.Store.ExistsW(ctx, path)
		return nodeRead[bool]{v: ok, stat: stat, watch: watch}, err
	})
	return r.v, r.stat, r.watch, err
}

// Multi runs the hooks around the wrapped store's Multi.
func (s *HookStore) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	return hook(s, ctx, Call{Method: "Multi", Ops: ops}, func() ([]store.OpResult, error) {
		return s.Store.Multi(ctx, ops...)
	})
}

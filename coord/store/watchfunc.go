package store

import "context"

// WatchFunc receives the one event of a watch armed by a FuncWatcher call.
type WatchFunc func(Event)

// FuncWatcher is the optional capability of a store that delivers a watch's
// event by calling a function instead of sending it on a channel, so that a
// holder of thousands of watches (coord's jobs) needs no goroutine waiting
// on them. Each method is its Store counterpart (GetW, ExistsW, ChildrenW)
// with the same reads and the same firing rules.
//
// Threading contract: fn is called at most once, and exactly once when the
// call returned no error: with the node event, or with EventNotWatching when
// the session expires or the store closes. It may be called before the call
// returns, and after a call that failed (a spurious event, as a watch may
// see one on any store: re-read). It is called on the adapter's dispatch
// goroutine (zkstore: the ZooKeeper client's event loop; memstore: the
// goroutine whose write fired it), possibly with the adapter's locks held:
// it must return at once, never block and never call the store. Enqueue the
// event and handle it elsewhere.
//
// zkstore and memstore implement it. A decorator that forwards it (the
// request counter, internal/storecount) has the methods whatever it
// wraps, so it also implements FuncWatchForwarder to say whether the
// wrapped store has it.
type FuncWatcher interface {
	GetWFunc(ctx context.Context, path string, fn WatchFunc) ([]byte, Stat, error)
	ExistsWFunc(ctx context.Context, path string, fn WatchFunc) (bool, Stat, error)
	ChildrenWFunc(ctx context.Context, path string, fn WatchFunc) ([]string, Stat, error)
}

// FuncWatchForwarder is implemented by a decorator whose FuncWatcher
// methods work only when the store it wraps has the capability.
type FuncWatchForwarder interface {
	// ForwardsFuncWatches reports whether the FuncWatcher methods work.
	ForwardsFuncWatches() bool
}

// FuncWatcherOf returns st as a FuncWatcher, or nil when it lacks the
// capability (the caller then waits on Store's channel watches).
func FuncWatcherOf(st Store) FuncWatcher {
	fw, ok := st.(FuncWatcher)
	if !ok {
		return nil
	}
	if f, ok := st.(FuncWatchForwarder); ok && !f.ForwardsFuncWatches() {
		return nil
	}
	return fw
}

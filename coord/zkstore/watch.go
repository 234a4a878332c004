package zkstore

import (
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
)

// watchKind is store.WatchKind (the firing table every adapter shares)
// applied to the event types the ZooKeeper client sends.
type watchKind store.WatchKind

const (
	watchData  = watchKind(store.WatchData)
	watchExist = watchKind(store.WatchExist)
	watchChild = watchKind(store.WatchChild)
)

// storeEvents maps the client's node event types to the store's.
var storeEvents = map[zk.EventType]store.EventType{
	zk.EventNodeCreated:         store.EventNodeCreated,
	zk.EventNodeDeleted:         store.EventNodeDeleted,
	zk.EventNodeDataChanged:     store.EventNodeDataChanged,
	zk.EventNodeChildrenChanged: store.EventNodeChildrenChanged,
}

// fires reports whether a node event of type t triggers a watch of kind k.
func (k watchKind) fires(t zk.EventType) bool { return store.WatchKind(k).Fires(storeEvents[t]) }

// watch is one armed store watch: fire is called with its one event by
// whoever removes the watch from the registry, with the registry's lock
// held. It never blocks: it sends on a channel of capacity 1 (GetW and the
// like) or calls a store.WatchFunc, which must not block (GetWFunc and the
// like).
type watch struct {
	kind watchKind
	gen  uint64 // client generation the watch was armed on
	path string // store path (without Root), reported in the event
	fire store.WatchFunc
}

// onceFunc and chanWatch are the store's (store.OnceFunc, store.ChanWatch).
var (
	onceFunc  = store.OnceFunc
	chanWatch = store.ChanWatch
)

// watchRegistry dispatches ZooKeeper node events to store watches (channels
// or store.WatchFuncs) without a goroutine per watch. Events arrive through
// the client's event callback; every watch is removed from the registry
// under the lock before it fires, and firing never blocks, so the callback
// never stalls the client.
//
// Watches are registered BEFORE the request is sent, because the client
// processes a watch event that follows the response on its receive goroutine
// possibly before the caller's goroutine wakes up: registering afterwards
// could miss it. The price is a rare spurious wake-up: an event for an
// earlier change of the same node, still in flight when the read was sent,
// fires the new watch. Callers re-read on every event, so this is harmless.
type watchRegistry struct {
	mu      sync.Mutex
	byPath  map[string][]*watch // key: full ZooKeeper path
	stopped error               // set by closeAll: later adds fire at once
}

func newWatchRegistry() *watchRegistry {
	return &watchRegistry{byPath: make(map[string][]*watch)}
}

// add arms a watch on fullPath for generation gen that calls fire.
func (r *watchRegistry) add(fullPath, storePath string, kind watchKind, gen uint64, fire store.WatchFunc) *watch {
	w := &watch{kind: kind, gen: gen, path: storePath, fire: fire}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped != nil {
		w.fire(store.Event{Type: store.EventNotWatching, Path: storePath, Err: r.stopped})
		return w
	}
	r.byPath[fullPath] = append(r.byPath[fullPath], w)
	return w
}

// remove disarms w (the call that armed it failed). It reports false when w
// had already fired.
func (r *watchRegistry) remove(fullPath string, w *watch) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.byPath[fullPath]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			if len(ws) == 0 {
				delete(r.byPath, fullPath)
			} else {
				r.byPath[fullPath] = ws
			}
			return true
		}
	}
	return false
}

// dispatch fires the watches of generation gen on fullPath that event type
// t triggers. It never blocks.
func (r *watchRegistry) dispatch(gen uint64, fullPath string, t zk.EventType, typ store.EventType) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.byPath[fullPath]
	if len(ws) == 0 {
		return
	}
	kept := ws[:0]
	for _, w := range ws {
		if w.gen == gen && w.kind.fires(t) {
			w.fire(store.Event{Type: typ, Path: w.path})
			continue
		}
		kept = append(kept, w)
	}
	for i := len(kept); i < len(ws); i++ {
		ws[i] = nil
	}
	if len(kept) == 0 {
		delete(r.byPath, fullPath)
	} else {
		r.byPath[fullPath] = kept
	}
}

// invalidate fires EventNotWatching with err on every watch armed on a
// generation up to and including gen (the session those watches belonged
// to is gone). It never blocks.
func (r *watchRegistry) invalidate(gen uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, ws := range r.byPath {
		kept := ws[:0]
		for _, w := range ws {
			if w.gen <= gen {
				w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: err})
				continue
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			delete(r.byPath, p)
		} else {
			r.byPath[p] = kept
		}
	}
}

// closeAll fires EventNotWatching with err on every watch and makes later
// adds fire at once.
func (r *watchRegistry) closeAll(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = err
	for p, ws := range r.byPath {
		for _, w := range ws {
			w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: err})
		}
		delete(r.byPath, p)
	}
}

// count returns the number of armed watches (for tests and metrics).
func (r *watchRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ws := range r.byPath {
		n += len(ws)
	}
	return n
}

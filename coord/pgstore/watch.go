package pgstore

import (
	"sync"

	"github.com/shardflow/shardflow/coord/store"
)

// watch is one armed watch: it fires on the first event of its kind on its
// path in a transaction after since, the zxid its read saw.
type watch struct {
	kind    store.WatchKind
	path    string
	since   int64
	existed bool   // the node existed at the read (set-watches check)
	gen     uint64 // session generation it was armed on
	fire    store.WatchFunc
}

// event is one node event of a committed transaction.
type event struct {
	zxid int64
	typ  store.EventType
	path string
}

// registry holds the armed watches and dispatches the events of committed
// transactions to them, in zxid order, without a goroutine per watch.
// Watches fire with the registry's lock held; firing never blocks.
type registry struct {
	mu      sync.Mutex
	last    int64 // highest zxid dispatched
	gen     uint64
	byPath  map[string][]*watch
	stopped error // set by Close: later adds fire at once
}

func newRegistry() *registry { return &registry{byPath: map[string][]*watch{}} }

// add arms w. It returns the highest zxid dispatched so far: when it is
// above w.since, events between them went by before w was armed, and the
// caller checks the node (check) itself.
func (r *registry) add(w *watch) (last int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped != nil {
		w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: r.stopped})
		return 0, false
	}
	if w.gen != r.gen {
		w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: store.ErrSessionExpired})
		return 0, false
	}
	r.byPath[w.path] = append(r.byPath[w.path], w)
	return r.last, true
}

// remove disarms w (its call failed).
func (r *registry) remove(w *watch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disarmLocked(w)
}

// disarmLocked unlinks w from its path's watches and reports whether it
// was still armed. r.mu is held.
func (r *registry) disarmLocked(w *watch) bool {
	ws := r.byPath[w.path]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			if len(ws) == 0 {
				delete(r.byPath, w.path)
			} else {
				r.byPath[w.path] = ws
			}
			return true
		}
	}
	return false
}

// lastZxid returns the highest zxid dispatched.
func (r *registry) lastZxid() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// setLast starts dispatching after zxid z (a fresh listening connection
// whose gap could not be replayed: the caller checks the watches itself).
func (r *registry) setLast(z int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if z > r.last {
		r.last = z
	}
}

// dispatch fires the watches that the events of transaction zxid trigger.
// Transactions at or below the last dispatched one are skipped (a replay
// overlapping a notification).
func (r *registry) dispatch(zxid int64, evs []event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if zxid <= r.last {
		return
	}
	r.last = zxid
	for _, ev := range evs {
		ws := r.byPath[ev.path]
		if len(ws) == 0 {
			continue
		}
		keep := ws[:0]
		for _, w := range ws {
			if ev.zxid > w.since && w.kind.Fires(ev.typ) {
				w.fire(store.Event{Type: ev.typ, Path: ev.path})
				continue
			}
			keep = append(keep, w)
		}
		if len(keep) == 0 {
			delete(r.byPath, ev.path)
		} else {
			r.byPath[ev.path] = keep
		}
	}
}

// armed returns every armed watch (for the reconnect check when the events
// since the last dispatched transaction are gone).
func (r *registry) armed() []*watch {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*watch
	for _, ws := range r.byPath {
		out = append(out, ws...)
	}
	return out
}

// fireIfArmed fires w with ev if it is still armed.
func (r *registry) fireIfArmed(w *watch, ev store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.disarmLocked(w) {
		w.fire(ev)
	}
}

// endSession fires every watch with EventNotWatching (the session expired)
// and moves to the next session generation.
func (r *registry) endSession(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.fireAllLocked(err)
}

// stop fires every watch with EventNotWatching(err) and makes later adds
// fire at once.
func (r *registry) stop(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = err
	r.fireAllLocked(err)
}

func (r *registry) fireAllLocked(err error) {
	for p, ws := range r.byPath {
		for _, w := range ws {
			w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: err})
		}
		delete(r.byPath, p)
	}
}

// generation returns the current session generation.
func (r *registry) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

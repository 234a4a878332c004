package memstore

import "github.com/shardflow/shardflow/coord/store"

type watchKind int

const (
	// dataWatch is set by GetW and ExistsW: it fires on creation (ExistsW
	// on a missing node), data change and deletion.
	dataWatch watchKind = iota
	// childWatch is set by ChildrenW: it fires on a child's creation or
	// deletion and on the node's deletion.
	childWatch
)

// watch is one one-shot watch. fire is called exactly once, with the
// server's lock held: it sends on a channel of capacity 1 (GetW and the
// like) or calls a store.WatchFunc (GetWFunc and the like), neither of
// which blocks.
type watch struct {
	owner *Session
	path  string
	kind  watchKind
	fire  store.WatchFunc
}

func (s *Server) table(k watchKind) map[string]map[*watch]struct{} {
	if k == dataWatch {
		return s.dataWatches
	}
	return s.childWatches
}

// chanWatch returns a channel of capacity 1 and the function that sends
// the watch's one event on it.
func chanWatch() (<-chan store.Event, store.WatchFunc) {
	ch := make(chan store.Event, 1)
	return ch, func(ev store.Event) { ch <- ev }
}

// addWatchLocked registers a watch for the session's current session.
func (s *Server) addWatchLocked(owner *Session, p string, k watchKind, fire store.WatchFunc) {
	w := &watch{owner: owner, path: p, kind: k, fire: fire}
	t := s.table(k)
	ws := t[p]
	if ws == nil {
		ws = make(map[*watch]struct{})
		t[p] = ws
	}
	ws[w] = struct{}{}
	owner.watches[w] = struct{}{}
}

// unregisterLocked removes a watch from the server's table and its owner.
func (s *Server) unregisterLocked(w *watch) {
	t := s.table(w.kind)
	if ws := t[w.path]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(t, w.path)
		}
	}
	delete(w.owner.watches, w)
}

// fireLocked triggers every watch of kind k on p. A watch whose session is
// disconnected is queued on the session and delivered on Reconnect, as
// ZooKeeper delivers events only over a live connection.
func (s *Server) fireLocked(p string, k watchKind, typ store.EventType) {
	ws := s.table(k)[p]
	if len(ws) == 0 {
		return
	}
	delete(s.table(k), p)
	for w := range ws {
		delete(w.owner.watches, w)
		ev := store.Event{Type: typ, Path: p}
		if w.owner.disconnected {
			w.owner.queued = append(w.owner.queued, queuedEvent{w, ev})
			continue
		}
		w.fire(ev)
	}
}

type queuedEvent struct {
	w  *watch
	ev store.Event
}

// dropWatchesLocked ends every watch of the session, registered or queued,
// with EventNotWatching carrying cause.
func (s *Server) dropWatchesLocked(sess *Session, cause error) {
	for w := range sess.watches {
		s.unregisterLocked(w)
		w.fire(store.Event{Type: store.EventNotWatching, Path: w.path, Err: cause})
	}
	for _, q := range sess.queued {
		q.w.fire(store.Event{Type: store.EventNotWatching, Path: q.w.path, Err: cause})
	}
	sess.queued = nil
}

package store

import "sync/atomic"

// WatchKind is which one-shot watch a call armed: GetW, ExistsW and
// ChildrenW each fire on a different set of node events (ZooKeeper's
// rules). The adapters share the table, so a watch fires alike on every
// store.
type WatchKind uint8

// The watch kinds.
const (
	WatchData  WatchKind = iota + 1 // GetW: data change or deletion
	WatchExist                      // ExistsW: creation, data change or deletion
	WatchChild                      // ChildrenW: child change or deletion
)

// Fires reports whether a node event of type t triggers a watch of kind k
// (the table of the ZooKeeper client's notifyWatches).
func (k WatchKind) Fires(t EventType) bool {
	switch t {
	case EventNodeCreated:
		return k == WatchExist
	case EventNodeDataChanged:
		return k == WatchExist || k == WatchData
	case EventNodeChildrenChanged:
		return k == WatchChild
	case EventNodeDeleted:
		return true
	}
	return false
}

// OnceFunc returns fn guarded to run at most once: an adapter may fire a
// watch from more than one place (its dispatcher and a check made when the
// watch is armed or re-armed), and a WatchFunc's contract is one call.
func OnceFunc(fn WatchFunc) WatchFunc {
	var done atomic.Bool
	return func(ev Event) {
		if done.CompareAndSwap(false, true) {
			fn(ev)
		}
	}
}

// ChanWatch returns a channel of capacity 1 and the function, called at
// most once, that sends the watch's event on it without blocking: what
// GetW, ExistsW and ChildrenW return, on top of an adapter's WatchFuncs.
func ChanWatch() (<-chan Event, WatchFunc) {
	ch := make(chan Event, 1)
	return ch, OnceFunc(func(ev Event) { ch <- ev })
}

package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// funcWatch records the calls of a store.WatchFunc: the events go to a
// channel (capacity 2, so a second call, which the contract forbids, is
// seen rather than blocking the adapter) and calls counts them.
type funcWatch struct {
	ch    chan store.Event
	mu    sync.Mutex
	calls int
}

func newFuncWatch() *funcWatch { return &funcWatch{ch: make(chan store.Event, 2)} }

func (f *funcWatch) fn(ev store.Event) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	select {
	case f.ch <- ev:
	default:
	}
}

func (f *funcWatch) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// funcWatcher returns st's store.FuncWatcher, skipping the test when the
// adapter lacks the optional capability.
func funcWatcher(t *testing.T, st store.Store) store.FuncWatcher {
	t.Helper()
	fw := store.FuncWatcherOf(st)
	if fw == nil {
		t.Skipf("%T does not implement store.FuncWatcher (optional)", st)
	}
	return fw
}

// watchFuncs checks the optional store.FuncWatcher capability: the same
// firing rules as the channel watches, the function called once.
func (s *suite) watchFuncs(t *testing.T) {
	parallel(t, "GetWFunc calls its function once on a change by another session", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		fw := funcWatcher(t, w)
		p := mustCreate(t, other, store.Join(root, "n"), []byte("0"), store.Persistent)
		f := newFuncWatch()
		data, _, err := fw.GetWFunc(ctx(t), p, f.fn)
		if err != nil || string(data) != "0" {
			t.Fatalf("GetWFunc: %q, %v; want \"0\"", data, err)
		}
		if _, err := other.Set(ctx(t), p, []byte("1"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, f.ch, store.EventNodeDataChanged, p, "GetWFunc after Set")
		if _, err := other.Set(ctx(t), p, []byte("2"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		barrier(t, w, root)
		if n := f.count(); n != 1 {
			t.Fatalf("GetWFunc's function called %d times after two Sets, want 1 (one-shot)", n)
		}
	})

	parallel(t, "ExistsWFunc on a missing node fires on its creation", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		fw := funcWatcher(t, w)
		p := store.Join(root, "n")
		f := newFuncWatch()
		ok, _, err := fw.ExistsWFunc(ctx(t), p, f.fn)
		if err != nil || ok {
			t.Fatalf("ExistsWFunc on a missing node: %v, %v; want false, nil", ok, err)
		}
		mustCreate(t, other, p, nil, store.Persistent)
		expectEvent(t, f.ch, store.EventNodeCreated, p, "ExistsWFunc after Create")
	})

	parallel(t, "ChildrenWFunc fires on a child's creation", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		fw := funcWatcher(t, w)
		f := newFuncWatch()
		names, _, err := fw.ChildrenWFunc(ctx(t), root, f.fn)
		if err != nil || len(names) != 0 {
			t.Fatalf("ChildrenWFunc of an empty node: %v, %v", names, err)
		}
		mustCreate(t, other, store.Join(root, "c"), nil, store.Persistent)
		expectEvent(t, f.ch, store.EventNodeChildrenChanged, root, "ChildrenWFunc after a child's Create")
	})

	parallel(t, "GetWFunc on a missing node fails and never calls its function", func(t *testing.T) {
		w, root := s.open(t), s.h.Root(t)
		fw := funcWatcher(t, w)
		p := store.Join(root, "missing")
		f := newFuncWatch()
		if _, _, err := fw.GetWFunc(ctx(t), p, f.fn); !errors.Is(err, store.ErrNoNode) {
			t.Fatalf("GetWFunc of a missing node: %v, want ErrNoNode", err)
		}
		mustCreate(t, w, p, nil, store.Persistent)
		barrier(t, w, root)
		if n := f.count(); n != 0 {
			t.Fatalf("the function of a failed GetWFunc was called %d times on the node's creation", n)
		}
	})

	parallel(t, "Close calls pending functions with not-watching", func(t *testing.T) {
		w, root := s.h.NewSession(t), s.h.Root(t)
		awaitSession(t, w, func(s store.Session) bool { return s.State == store.StateConnected })
		fw := funcWatcher(t, w)
		f := newFuncWatch()
		if _, _, err := fw.ChildrenWFunc(ctx(t), root, f.fn); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		ev := awaitEvent(t, f.ch, "ChildrenWFunc after Close")
		if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrClosed) {
			t.Fatalf("after Close: event %v (err %v), want not-watching with ErrClosed", ev.Type, ev.Err)
		}
		if n := f.count(); n != 1 {
			t.Fatalf("function called %d times, want 1", n)
		}
	})

	parallel(t, "a session expiry calls pending functions with not-watching", func(t *testing.T) {
		w, root := s.open(t), s.h.Root(t)
		fw := funcWatcher(t, w)
		f := newFuncWatch()
		if _, _, err := fw.ExistsWFunc(ctx(t), store.Join(root, "n"), f.fn); err != nil {
			t.Fatal(err)
		}
		s.h.Expire(t, w)
		ev := awaitEvent(t, f.ch, "ExistsWFunc after the session's expiry")
		if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrSessionExpired) {
			t.Fatalf("after expiry: event %v (err %v), want not-watching with ErrSessionExpired", ev.Type, ev.Err)
		}
	})
}

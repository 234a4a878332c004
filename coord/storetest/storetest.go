// Package storetest is the conformance suite of store.Store: one set of
// tests that every adapter (coord/memstore, coord/zkstore) must pass, so code
// written against the interface behaves the same on either.
//
// An adapter's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, harness{...})
//	}
//
// The suite reads like a specification: each subtest name states one rule of
// ZooKeeper's semantics as shardflow relies on it. Waits are bounded by
// EventTimeout and never use bare sleeps; expectations that depend on timing
// (watch delivery, session expiry) tolerate the asynchrony of a real
// ZooKeeper ensemble. Subtests run in parallel (t.Parallel), as concurrent
// users would: each takes its own Root and opens its own sessions, so they do
// not collide on a shared ZooKeeper.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// EventTimeout bounds every wait of the suite: for a watch event, a session
// state, or an expiry to be observed.
const EventTimeout = 10 * time.Second

// Harness gives the suite sessions on the tree under test. Its methods are
// called from parallel subtests, so they must be safe for concurrent use.
type Harness interface {
	// NewSession opens a new session on the tree under test, StateConnected
	// (or soon to be: the suite waits up to EventTimeout). The suite closes it.
	NewSession(t *testing.T) store.Store
	// Expire forces the expiry of s's session (memstore: Expire(); ZooKeeper:
	// cut its connection past the timeout). It may return before the adapter
	// notices; the suite waits for the new session.
	Expire(t *testing.T, s store.Store)
	// Root is a fresh, empty, existing path for this test (so runs against a
	// shared ZooKeeper do not collide). Called once per subtest.
	Root(t *testing.T) string
}

// Run runs the whole conformance suite against h. Each rule is a subtest, so
// `go test -run 'Conformance/Watches'` selects a group.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s := &suite{h: h}
	parallel(t, "Nodes", s.nodes)
	parallel(t, "Errors", s.failures)
	parallel(t, "Sequential", s.sequential)
	parallel(t, "Stat", s.stat)
	parallel(t, "Watches", s.watches)
	parallel(t, "WatchFuncs", s.watchFuncs)
	parallel(t, "Multi", s.multi)
	parallel(t, "Ephemeral", s.ephemeral)
	parallel(t, "Session", s.session)
	parallel(t, "Concurrency", s.concurrency)
}

type suite struct{ h Harness }

// parallel runs f as a subtest in parallel with its siblings: every subtest
// has its own Root and sessions, so none depends on another's state.
func parallel(t *testing.T, name string, f func(t *testing.T)) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t)
	})
}

// open returns a new session, closed at the end of the test, once connected.
func (s *suite) open(t *testing.T) store.Store {
	t.Helper()
	st := s.h.NewSession(t)
	t.Cleanup(func() { _ = st.Close() })
	awaitSession(t, st, func(cur store.Session) bool { return cur.State == store.StateConnected })
	return st
}

// ctx returns a context bounded by EventTimeout, cancelled with the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*EventTimeout)
	t.Cleanup(cancel)
	return c
}

// awaitEvent returns the event of a watch channel, failing after EventTimeout.
func awaitEvent(t *testing.T, ch <-chan store.Event, what string) store.Event {
	t.Helper()
	if ch == nil {
		t.Fatalf("%s: nil watch channel", what)
	}
	return testwait.Recv(t, EventTimeout, what+": a watch event", ch)
}

// expectEvent awaits one event and checks its type and path.
func expectEvent(t *testing.T, ch <-chan store.Event, typ store.EventType, path, what string) {
	t.Helper()
	ev := awaitEvent(t, ch, what)
	if ev.Type != typ || ev.Path != path {
		t.Fatalf("%s: got event %v %q (err %v), want %v %q", what, ev.Type, ev.Path, ev.Err, typ, path)
	}
}

// expectQuiet checks that a watch channel holds no event now. Callers make
// this meaningful with a barrier: a later event on the same session that has
// already arrived (events of one session are delivered in order).
func expectQuiet(t *testing.T, ch <-chan store.Event, what string) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("%s: unexpected event %v %q (err %v)", what, ev.Type, ev.Path, ev.Err)
	default:
	}
}

// barrier makes a change on a fresh node that st watches and waits for it,
// so every event st was due before it has been delivered too.
func barrier(t *testing.T, st store.Store, root string) {
	t.Helper()
	c := ctx(t)
	p := store.Join(root, "barrier")
	ok, _, ch, err := st.ExistsW(c, p)
	if err != nil {
		t.Fatalf("barrier ExistsW %s: %v", p, err)
	}
	if ok {
		if err := st.Delete(c, p, store.AnyVersion); err != nil {
			t.Fatalf("barrier Delete %s: %v", p, err)
		}
		expectEvent(t, ch, store.EventNodeDeleted, p, "barrier")
		return
	}
	if _, err := st.Create(c, p, nil, store.Persistent); err != nil {
		t.Fatalf("barrier Create %s: %v", p, err)
	}
	expectEvent(t, ch, store.EventNodeCreated, p, "barrier")
}

// awaitSession follows Session() until ok holds, failing after EventTimeout.
func awaitSession(t *testing.T, st store.Store, ok func(store.Session) bool) store.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), EventTimeout)
	defer cancel()
	cur, err := store.AwaitSession(ctx, st, ok)
	if err != nil {
		t.Fatalf("session still %v (id 0x%x) after %v", cur.State, cur.ID, EventTimeout)
	}
	return cur
}

func mustCreate(t *testing.T, st store.Store, p string, data []byte, mode store.Mode) string {
	t.Helper()
	got, err := st.Create(ctx(t), p, data, mode)
	if err != nil {
		t.Fatalf("Create %s (%v): %v", p, mode, err)
	}
	return got
}

func mustGet(t *testing.T, st store.Store, p string) ([]byte, store.Stat) {
	t.Helper()
	data, stat, err := st.Get(ctx(t), p)
	if err != nil {
		t.Fatalf("Get %s: %v", p, err)
	}
	return data, stat
}

func mustExist(t *testing.T, st store.Store, p string, want bool) store.Stat {
	t.Helper()
	ok, stat, err := st.Exists(ctx(t), p)
	if err != nil {
		t.Fatalf("Exists %s: %v", p, err)
	}
	if ok != want {
		t.Fatalf("Exists %s = %v, want %v", p, ok, want)
	}
	return stat
}

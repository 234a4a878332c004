package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

func (s *suite) ephemeral(t *testing.T) {
	parallel(t, "Close removes the session's ephemerals at once and other sessions' watches see it", func(t *testing.T) {
		owner, w, root := s.open(t), s.open(t), s.h.Root(t)
		e := mustCreate(t, owner, store.Join(root, "e"), nil, store.Ephemeral)
		es := mustCreate(t, owner, store.Join(root, "es-"), nil, store.EphemeralSequential)
		p := mustCreate(t, owner, store.Join(root, "p"), nil, store.Persistent)
		_, _, eCh, err := w.ExistsW(ctx(t), e)
		if err != nil {
			t.Fatal(err)
		}
		_, _, esCh, err := w.GetW(ctx(t), es)
		if err != nil {
			t.Fatal(err)
		}
		if err := owner.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		expectEvent(t, eCh, store.EventNodeDeleted, e, "ExistsW on the closed session's ephemeral")
		expectEvent(t, esCh, store.EventNodeDeleted, es, "GetW on the closed session's ephemeral-sequential")
		mustExist(t, w, e, false)
		mustExist(t, w, es, false)
		mustExist(t, w, p, true)
	})

	parallel(t, "expiry removes the ephemerals, ends the watches with ErrSessionExpired and opens a new session", func(t *testing.T) {
		owner, w, root := s.open(t), s.open(t), s.h.Root(t)
		e := mustCreate(t, owner, store.Join(root, "e"), nil, store.Ephemeral)
		p := mustCreate(t, owner, store.Join(root, "p"), nil, store.Persistent)
		_, _, peerCh, err := w.ExistsW(ctx(t), e)
		if err != nil {
			t.Fatal(err)
		}
		_, _, ownCh, err := owner.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		_, _, ownChildCh, err := owner.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		before, changed := owner.Session()

		s.h.Expire(t, owner)

		expectEvent(t, peerCh, store.EventNodeDeleted, e, "peer's ExistsW on the expired ephemeral")
		for _, ch := range []<-chan store.Event{ownCh, ownChildCh} {
			ev := awaitEvent(t, ch, "expired session's own watch")
			if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrSessionExpired) {
				t.Fatalf("expired session's watch got %v (err %v), want not-watching with ErrSessionExpired", ev.Type, ev.Err)
			}
		}
		select {
		case <-changed:
		default:
			t.Fatal("Session() change channel not closed after expiry")
		}
		after := awaitSession(t, owner, func(cur store.Session) bool {
			return cur.State == store.StateConnected && cur.ID != before.ID
		})
		if after.ID == 0 {
			t.Fatal("new session has id 0")
		}
		mustExist(t, w, e, false)
		mustExist(t, owner, p, true)
		again := mustCreate(t, owner, e, nil, store.Ephemeral)
		if st := mustExist(t, w, again, true); st.EphemeralOwner != after.ID {
			t.Fatalf("re-created ephemeral owned by 0x%x, want the new session 0x%x", st.EphemeralOwner, after.ID)
		}
	})
}

func (s *suite) session(t *testing.T) {
	parallel(t, "a new session is connected with a non-zero id unique among sessions", func(t *testing.T) {
		a, b := s.open(t), s.open(t)
		sa, _ := a.Session()
		sb, _ := b.Session()
		if sa.State != store.StateConnected || sa.ID == 0 || sa.Timeout <= 0 {
			t.Fatalf("session %+v, want connected with an id and a timeout", sa)
		}
		if sa.ID == sb.ID {
			t.Fatalf("two sessions share id 0x%x", sa.ID)
		}
	})

	parallel(t, "Close ends pending watches with ErrClosed and every later call fails with ErrClosed", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "p"), nil, store.Persistent)
		_, _, ch, err := st.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		_, changed := st.Session()
		if err := st.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		ev := awaitEvent(t, ch, "watch of a closed session")
		if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrClosed) {
			t.Fatalf("watch of a closed session got %v (err %v), want not-watching with ErrClosed", ev.Type, ev.Err)
		}
		select {
		case <-changed:
		default:
			t.Fatal("Session() change channel not closed by Close")
		}
		if cur, _ := st.Session(); cur.State != store.StateClosed {
			t.Fatalf("state after Close %v, want closed", cur.State)
		}
		for name, err := range allCalls(ctx(t), st, p) {
			if !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
	})

	parallel(t, "a call with a done context returns the context's error and applies nothing", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "p"), nil, store.Persistent)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		for name, err := range allCalls(done, st, p) {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
			}
		}
		mustExist(t, st, store.Join(p, "new"), false)
		if _, stat := mustGet(t, st, p); stat.Version != 0 {
			t.Fatalf("Set with a cancelled context changed the version to %d", stat.Version)
		}
	})
}

// allCalls makes one call of every Store method that takes a context on p
// (an existing node) and returns each call's error by method name.
func allCalls(c context.Context, st store.Store, p string) map[string]error {
	errs := map[string]error{}
	_, errs["Create"] = st.Create(c, store.Join(p, "new"), nil, store.Persistent)
	_, _, errs["Get"] = st.Get(c, p)
	_, _, _, errs["GetW"] = st.GetW(c, p)
	_, _, errs["Exists"] = st.Exists(c, p)
	_, _, _, errs["ExistsW"] = st.ExistsW(c, p)
	_, _, errs["Children"] = st.Children(c, p)
	_, _, _, errs["ChildrenW"] = st.ChildrenW(c, p)
	_, errs["Set"] = st.Set(c, p, []byte("x"), store.AnyVersion)
	errs["Delete"] = st.Delete(c, p, store.AnyVersion)
	_, errs["Multi"] = st.Multi(c, &store.CheckOp{Path: p, Version: store.AnyVersion})
	errs["Sync"] = st.Sync(c, p)
	return errs
}

package storetest

import (
	"errors"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// expectMultiError checks that err is a *store.MultiError for ops[index]
// unwrapping to want.
func expectMultiError(t *testing.T, err error, ops []store.Op, index int, want error) {
	t.Helper()
	var me *store.MultiError
	if !errors.As(err, &me) {
		t.Fatalf("Multi error %v (%T), want *store.MultiError", err, err)
	}
	if me.Index != index {
		t.Fatalf("MultiError.Index %d (%v), want %d", me.Index, me, index)
	}
	if me.Op != ops[index] {
		t.Fatalf("MultiError.Op %#v, want the op at index %d %#v", me.Op, index, ops[index])
	}
	if !errors.Is(err, want) {
		t.Fatalf("Multi error %v does not unwrap to %v", err, want)
	}
}

func (s *suite) multi(t *testing.T) {
	parallel(t, "a failing CheckOp in the middle applies nothing and fires nothing", func(t *testing.T) {
		st, w, root := s.open(t), s.open(t), s.h.Root(t)
		a := mustCreate(t, st, store.Join(root, "a"), []byte("a0"), store.Persistent)
		fresh, other := store.Join(root, "fresh"), store.Join(root, "other")
		_, _, aCh, err := w.GetW(ctx(t), a)
		if err != nil {
			t.Fatal(err)
		}
		_, _, freshCh, err := w.ExistsW(ctx(t), fresh)
		if err != nil {
			t.Fatal(err)
		}
		ops := []store.Op{
			&store.CreateOp{Path: fresh, Data: []byte("f"), Mode: store.Persistent},
			&store.SetOp{Path: a, Data: []byte("a1"), Version: 0},
			&store.CheckOp{Path: a, Version: 5},
			&store.CreateOp{Path: other, Mode: store.Persistent},
		}
		res, err := st.Multi(ctx(t), ops...)
		if res != nil {
			t.Errorf("failed Multi returned results %+v, want nil", res)
		}
		expectMultiError(t, err, ops, 2, store.ErrBadVersion)
		mustExist(t, st, fresh, false)
		mustExist(t, st, other, false)
		if data, stat := mustGet(t, st, a); string(data) != "a0" || stat.Version != 0 {
			t.Fatalf("%s after a failed Multi: %q version %d, want %q version 0", a, data, stat.Version, "a0")
		}
		barrier(t, w, root)
		expectQuiet(t, aCh, "GetW after a failed Multi")
		expectQuiet(t, freshCh, "ExistsW after a failed Multi")
	})

	parallel(t, "a failing CreateOp in the middle applies nothing", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		a := mustCreate(t, st, store.Join(root, "a"), nil, store.Persistent)
		b := mustCreate(t, st, store.Join(root, "b"), nil, store.Persistent)
		x := store.Join(root, "x")
		ops := []store.Op{
			&store.CreateOp{Path: x, Mode: store.Persistent},
			&store.CreateOp{Path: a, Mode: store.Persistent},
			&store.DeleteOp{Path: b, Version: store.AnyVersion},
		}
		_, err := st.Multi(ctx(t), ops...)
		expectMultiError(t, err, ops, 1, store.ErrNodeExists)
		mustExist(t, st, x, false)
		mustExist(t, st, b, true)
	})

	parallel(t, "CheckOp on a missing node fails with ErrNoNode", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		ops := []store.Op{&store.CheckOp{Path: store.Join(root, "missing"), Version: store.AnyVersion}}
		_, err := st.Multi(ctx(t), ops...)
		expectMultiError(t, err, ops, 0, store.ErrNoNode)
	})

	parallel(t, "a failing first op applies nothing of the rest", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		x := store.Join(root, "x")
		ops := []store.Op{
			&store.DeleteOp{Path: store.Join(root, "missing"), Version: store.AnyVersion},
			&store.CreateOp{Path: x, Mode: store.Persistent},
		}
		_, err := st.Multi(ctx(t), ops...)
		expectMultiError(t, err, ops, 0, store.ErrNoNode)
		mustExist(t, st, x, false)
	})

	parallel(t, "a successful Multi applies every op in one transaction and returns created paths", func(t *testing.T) {
		st, w, root := s.open(t), s.open(t), s.h.Root(t)
		a := mustCreate(t, st, store.Join(root, "a"), []byte("a0"), store.Persistent)
		d := mustCreate(t, st, store.Join(root, "d"), nil, store.Persistent)
		q := mustCreate(t, st, store.Join(root, "q"), nil, store.Persistent)
		c := store.Join(root, "c")
		_, _, cCh, err := w.ExistsW(ctx(t), c)
		if err != nil {
			t.Fatal(err)
		}
		_, _, aCh, err := w.GetW(ctx(t), a)
		if err != nil {
			t.Fatal(err)
		}
		ops := []store.Op{
			&store.CreateOp{Path: store.Join(q, "s-"), Data: []byte("seq"), Mode: store.PersistentSequential},
			&store.CreateOp{Path: c, Data: []byte("c"), Mode: store.Ephemeral},
			&store.SetOp{Path: a, Data: []byte("a1"), Version: 0},
			&store.CheckOp{Path: c, Version: 0},
			&store.DeleteOp{Path: d, Version: 0},
			&store.CheckOp{Path: a, Version: 1},
			&store.CreateOp{Path: store.Join(root, "last"), Mode: store.Persistent},
		}
		res, err := st.Multi(ctx(t), ops...)
		if err != nil {
			t.Fatalf("Multi: %v", err)
		}
		if len(res) != len(ops) {
			t.Fatalf("Multi returned %d results, want %d", len(res), len(ops))
		}
		if res[0].Path != store.Join(q, "s-0000000000") {
			t.Fatalf("sequential CreateOp result path %q, want %s", res[0].Path, store.Join(q, "s-0000000000"))
		}
		if res[1].Path != c {
			t.Fatalf("CreateOp result path %q, want %q", res[1].Path, c)
		}
		if res[2].Stat.Version != 1 {
			t.Fatalf("SetOp result version %d, want 1", res[2].Stat.Version)
		}
		if data, _ := mustGet(t, st, res[0].Path); string(data) != "seq" {
			t.Fatalf("%s data %q, want %q", res[0].Path, data, "seq")
		}
		mustExist(t, st, d, false)
		_, sq := mustGet(t, st, res[0].Path)
		_, sc := mustGet(t, st, c)
		_, sa := mustGet(t, st, a)
		_, sl := mustGet(t, st, res[6].Path)
		if sq.Czxid != sc.Czxid || sa.Mzxid != sc.Czxid || sl.Czxid != sc.Czxid {
			t.Fatalf("one Multi wrote zxids %d, %d, %d and %d, want one transaction id", sq.Czxid, sc.Czxid, sa.Mzxid, sl.Czxid)
		}
		if sess, _ := st.Session(); sc.EphemeralOwner != sess.ID {
			t.Fatalf("ephemeral created by Multi owned by 0x%x, want the session 0x%x", sc.EphemeralOwner, sess.ID)
		}
		expectEvent(t, cCh, store.EventNodeCreated, c, "ExistsW after Multi")
		expectEvent(t, aCh, store.EventNodeDataChanged, a, "GetW after Multi")
	})
}

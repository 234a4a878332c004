package storetest

import (
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

func (s *suite) watches(t *testing.T) {
	parallel(t, "a data watch fires once on a change by another session", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "n"), nil, store.Persistent)
		_, _, ch, err := w.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Set(ctx(t), p, []byte("1"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDataChanged, p, "GetW after Set")
		if _, err := other.Set(ctx(t), p, []byte("2"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		barrier(t, w, root)
		expectQuiet(t, ch, "GetW after a second Set (one-shot)")
	})

	parallel(t, "a session's own writes fire its watches", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), nil, store.Persistent)
		_, _, ch, err := st.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Set(ctx(t), p, []byte("1"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDataChanged, p, "GetW after own Set")
	})

	parallel(t, "each watch call gets its own event", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "n"), nil, store.Persistent)
		_, _, ch1, err := w.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		_, _, ch2, err := w.ExistsW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Set(ctx(t), p, []byte("1"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch1, store.EventNodeDataChanged, p, "GetW")
		expectEvent(t, ch2, store.EventNodeDataChanged, p, "ExistsW on the same node")
	})

	parallel(t, "GetW sees the node's deletion", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "n"), nil, store.Persistent)
		_, _, ch, err := w.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(ctx(t), p, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDeleted, p, "GetW after Delete")
	})

	parallel(t, "ExistsW on a missing node sees its creation", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := store.Join(root, "later")
		ok, _, ch, err := w.ExistsW(ctx(t), p)
		if err != nil || ok {
			t.Fatalf("ExistsW missing = %v, %v; want false, nil", ok, err)
		}
		mustCreate(t, other, p, nil, store.Ephemeral)
		expectEvent(t, ch, store.EventNodeCreated, p, "ExistsW after Create")
	})

	parallel(t, "ExistsW on an existing node sees a data change and a deletion", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "n"), nil, store.Persistent)
		ok, _, ch, err := w.ExistsW(ctx(t), p)
		if err != nil || !ok {
			t.Fatalf("ExistsW = %v, %v; want true, nil", ok, err)
		}
		if _, err := other.Set(ctx(t), p, []byte("x"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDataChanged, p, "ExistsW after Set")
		_, _, ch, err = w.ExistsW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(ctx(t), p, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDeleted, p, "ExistsW after Delete")
	})

	parallel(t, "ChildrenW sees a child added and, re-armed, a child removed", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "p"), nil, store.Persistent)
		_, _, ch, err := w.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		c := mustCreate(t, other, store.Join(p, "c"), nil, store.Persistent)
		expectEvent(t, ch, store.EventNodeChildrenChanged, p, "ChildrenW after a child's Create")
		names, _, ch, err := w.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "c" {
			t.Fatalf("re-armed ChildrenW lists %q, want [c]", names)
		}
		if err := other.Delete(ctx(t), c, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeChildrenChanged, p, "ChildrenW after a child's Delete")
	})

	parallel(t, "ChildrenW ignores data changes of the node and its children", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "p"), nil, store.Persistent)
		c := mustCreate(t, other, store.Join(p, "c"), nil, store.Persistent)
		_, _, ch, err := w.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Set(ctx(t), p, []byte("x"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Set(ctx(t), c, []byte("x"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, other, store.Join(c, "grandchild"), nil, store.Persistent)
		barrier(t, w, root)
		expectQuiet(t, ch, "ChildrenW after data changes and a grandchild")
	})

	parallel(t, "ChildrenW sees the node's deletion", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "p"), nil, store.Persistent)
		_, _, ch, err := w.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(ctx(t), p, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, store.EventNodeDeleted, p, "ChildrenW after the node's Delete")
	})

	parallel(t, "a data watch ignores child changes", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "p"), nil, store.Persistent)
		_, _, ch, err := w.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, other, store.Join(p, "c"), nil, store.Persistent)
		barrier(t, w, root)
		expectQuiet(t, ch, "GetW after a child's Create")
	})

	parallel(t, "a failed write fires nothing", func(t *testing.T) {
		w, other, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, other, store.Join(root, "p"), nil, store.Persistent)
		_, _, dataCh, err := w.GetW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		_, _, childCh, err := w.ChildrenW(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = other.Set(ctx(t), p, []byte("x"), 7)                                 // ErrBadVersion
		_, _ = other.Create(ctx(t), p, nil, store.Persistent)                       // ErrNodeExists
		_, _ = other.Create(ctx(t), store.Join(p, "m", "c"), nil, store.Persistent) // ErrNoParent
		barrier(t, w, root)
		expectQuiet(t, dataCh, "GetW after refused writes")
		expectQuiet(t, childCh, "ChildrenW after refused writes")
	})
}

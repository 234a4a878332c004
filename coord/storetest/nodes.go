package storetest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

func (s *suite) nodes(t *testing.T) {
	parallel(t, "Create then Get returns the data with version 0", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := store.Join(root, "n")
		if got := mustCreate(t, st, p, []byte("hello"), store.Persistent); got != p {
			t.Fatalf("Create returned %q, want %q", got, p)
		}
		data, stat := mustGet(t, st, p)
		if string(data) != "hello" {
			t.Fatalf("Get data %q, want %q", data, "hello")
		}
		if stat.Version != 0 || stat.Cversion != 0 || stat.NumChildren != 0 || stat.EphemeralOwner != 0 {
			t.Fatalf("fresh persistent node stat %+v: want version, cversion, children and owner 0", stat)
		}
	})

	parallel(t, "Create with nil data stores empty data", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "empty"), nil, store.Persistent)
		if data, _ := mustGet(t, st, p); len(data) != 0 {
			t.Fatalf("Get data %q, want empty", data)
		}
	})

	parallel(t, "Get returns a copy the caller may modify", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		in := []byte("abc")
		p := mustCreate(t, st, store.Join(root, "n"), in, store.Persistent)
		in[0] = 'X'
		data, _ := mustGet(t, st, p)
		data[1] = 'Y'
		if again, _ := mustGet(t, st, p); string(again) != "abc" {
			t.Fatalf("stored data %q changed through a caller's slice, want %q", again, "abc")
		}
	})

	parallel(t, "Set with the current version replaces the data and increments the version", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), []byte("v0"), store.Persistent)
		stat, err := st.Set(ctx(t), p, []byte("v1"), 0)
		if err != nil {
			t.Fatalf("Set version 0: %v", err)
		}
		if stat.Version != 1 {
			t.Fatalf("Set returned version %d, want 1", stat.Version)
		}
		stat, err = st.Set(ctx(t), p, []byte("v2"), store.AnyVersion)
		if err != nil {
			t.Fatalf("Set AnyVersion: %v", err)
		}
		if stat.Version != 2 {
			t.Fatalf("Set returned version %d, want 2", stat.Version)
		}
		data, got := mustGet(t, st, p)
		if string(data) != "v2" || got.Version != 2 {
			t.Fatalf("Get after Set: %q version %d, want %q version 2", data, got.Version, "v2")
		}
	})

	parallel(t, "Delete with the current version removes the node", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), nil, store.Persistent)
		if _, err := st.Set(ctx(t), p, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(ctx(t), p, 1); err != nil {
			t.Fatalf("Delete version 1: %v", err)
		}
		mustExist(t, st, p, false)
		q := mustCreate(t, st, store.Join(root, "m"), nil, store.Persistent)
		if err := st.Delete(ctx(t), q, store.AnyVersion); err != nil {
			t.Fatalf("Delete AnyVersion: %v", err)
		}
		mustExist(t, st, q, false)
	})

	parallel(t, "Exists on a missing node is false without error", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		ok, stat, err := st.Exists(ctx(t), store.Join(root, "missing"))
		if err != nil || ok {
			t.Fatalf("Exists missing = %v, %v; want false, nil", ok, err)
		}
		if stat != (store.Stat{}) {
			t.Fatalf("Exists missing returned stat %+v, want zero", stat)
		}
		mustExist(t, st, root, true)
	})

	parallel(t, "Children lists direct children sorted with the parent's stat", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		for _, n := range []string{"c", "a", "b"} {
			mustCreate(t, st, store.Join(root, n), nil, store.Persistent)
		}
		mustCreate(t, st, store.Join(root, "a", "deep"), nil, store.Persistent)
		names, stat, err := st.Children(ctx(t), root)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "b", "c"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("Children = %q, want %q", names, want)
		}
		if stat.NumChildren != 3 {
			t.Fatalf("parent NumChildren %d, want 3", stat.NumChildren)
		}
		leaf, _, err := st.Children(ctx(t), store.Join(root, "b"))
		if err != nil || len(leaf) != 0 {
			t.Fatalf("Children of a leaf = %q, %v; want none", leaf, err)
		}
	})

	parallel(t, "a write on one session is visible to another after Sync", func(t *testing.T) {
		a, b, root := s.open(t), s.open(t), s.h.Root(t)
		p := mustCreate(t, a, store.Join(root, "n"), []byte("1"), store.Persistent)
		if _, err := a.Set(ctx(t), p, []byte("2"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(ctx(t), p); err != nil {
			t.Fatalf("Sync %s: %v", p, err)
		}
		if data, _ := mustGet(t, b, p); !bytes.Equal(data, []byte("2")) {
			t.Fatalf("after Sync the other session reads %q, want %q", data, "2")
		}
		if err := b.Sync(ctx(t), root); err != nil {
			t.Fatalf("Sync %s: %v", root, err)
		}
	})

	parallel(t, "CreateAll and DeleteAll build and remove a subtree", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		deep := store.Join(root, "x", "y", "z")
		if err := store.CreateAll(ctx(t), st, deep); err != nil {
			t.Fatalf("CreateAll %s: %v", deep, err)
		}
		mustExist(t, st, deep, true)
		if err := store.CreateAll(ctx(t), st, deep); err != nil {
			t.Fatalf("CreateAll on an existing path: %v", err)
		}
		mustCreate(t, st, store.Join(root, "x", "y", "w"), nil, store.Persistent)
		if err := store.DeleteAll(ctx(t), st, store.Join(root, "x")); err != nil {
			t.Fatalf("DeleteAll: %v", err)
		}
		mustExist(t, st, store.Join(root, "x"), false)
		if err := store.DeleteAll(ctx(t), st, store.Join(root, "x")); err != nil {
			t.Fatalf("DeleteAll on a missing path: %v", err)
		}
	})
}

func (s *suite) failures(t *testing.T) {
	parallel(t, "Get, Set, Delete and Children on a missing node fail with ErrNoNode", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := store.Join(root, "missing")
		if _, _, err := st.Get(ctx(t), p); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("Get: %v, want ErrNoNode", err)
		}
		if _, _, _, err := st.GetW(ctx(t), p); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("GetW: %v, want ErrNoNode", err)
		}
		if _, err := st.Set(ctx(t), p, nil, store.AnyVersion); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("Set: %v, want ErrNoNode", err)
		}
		if err := st.Delete(ctx(t), p, store.AnyVersion); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("Delete: %v, want ErrNoNode", err)
		}
		if _, _, err := st.Children(ctx(t), p); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("Children: %v, want ErrNoNode", err)
		}
		if _, _, _, err := st.ChildrenW(ctx(t), p); !errors.Is(err, store.ErrNoNode) {
			t.Errorf("ChildrenW: %v, want ErrNoNode", err)
		}
	})

	parallel(t, "Create under a missing parent fails with ErrNoParent", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := store.Join(root, "missing", "child")
		for _, mode := range []store.Mode{store.Persistent, store.Ephemeral, store.PersistentSequential, store.EphemeralSequential} {
			if _, err := st.Create(ctx(t), p, nil, mode); !errors.Is(err, store.ErrNoParent) {
				t.Errorf("Create %s (%v): %v, want ErrNoParent", p, mode, err)
			}
		}
	})

	parallel(t, "Create of an existing node fails with ErrNodeExists and keeps its data", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), []byte("first"), store.Persistent)
		if _, err := st.Create(ctx(t), p, []byte("second"), store.Persistent); !errors.Is(err, store.ErrNodeExists) {
			t.Fatalf("second Create: %v, want ErrNodeExists", err)
		}
		if _, err := st.Create(ctx(t), p, []byte("second"), store.Ephemeral); !errors.Is(err, store.ErrNodeExists) {
			t.Fatalf("ephemeral Create over a persistent node: %v, want ErrNodeExists", err)
		}
		if data, _ := mustGet(t, st, p); string(data) != "first" {
			t.Fatalf("data %q, want %q", data, "first")
		}
	})

	parallel(t, "Delete of a node with children fails with ErrNotEmpty", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), nil, store.Persistent)
		mustCreate(t, st, store.Join(p, "c"), nil, store.Persistent)
		if err := st.Delete(ctx(t), p, store.AnyVersion); !errors.Is(err, store.ErrNotEmpty) {
			t.Fatalf("Delete: %v, want ErrNotEmpty", err)
		}
		mustExist(t, st, p, true)
	})

	parallel(t, "Set and Delete with a stale version fail with ErrBadVersion", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "n"), []byte("a"), store.Persistent)
		if _, err := st.Set(ctx(t), p, []byte("b"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Set(ctx(t), p, []byte("c"), 0); !errors.Is(err, store.ErrBadVersion) {
			t.Fatalf("Set stale version: %v, want ErrBadVersion", err)
		}
		if err := st.Delete(ctx(t), p, 0); !errors.Is(err, store.ErrBadVersion) {
			t.Fatalf("Delete stale version: %v, want ErrBadVersion", err)
		}
		data, stat := mustGet(t, st, p)
		if string(data) != "b" || stat.Version != 1 {
			t.Fatalf("after refused writes: %q version %d, want %q version 1", data, stat.Version, "b")
		}
	})

	parallel(t, "malformed paths fail with ErrBadPath", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		for _, p := range []string{"", "relative", root + "/", root + "//x", root + "/./x", root + "/../x"} {
			if _, err := st.Create(ctx(t), p, nil, store.Persistent); !errors.Is(err, store.ErrBadPath) {
				t.Errorf("Create %q: %v, want ErrBadPath", p, err)
			}
			if _, _, err := st.Get(ctx(t), p); !errors.Is(err, store.ErrBadPath) {
				t.Errorf("Get %q: %v, want ErrBadPath", p, err)
			}
			if _, _, err := st.Exists(ctx(t), p); !errors.Is(err, store.ErrBadPath) {
				t.Errorf("Exists %q: %v, want ErrBadPath", p, err)
			}
			if _, err := st.Set(ctx(t), p, nil, store.AnyVersion); !errors.Is(err, store.ErrBadPath) {
				t.Errorf("Set %q: %v, want ErrBadPath", p, err)
			}
			if err := st.Delete(ctx(t), p, store.AnyVersion); !errors.Is(err, store.ErrBadPath) {
				t.Errorf("Delete %q: %v, want ErrBadPath", p, err)
			}
		}
	})

	parallel(t, "children of an ephemeral node are refused with ErrEphemeralChild", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "eph"), nil, store.Ephemeral)
		for _, mode := range []store.Mode{store.Persistent, store.Ephemeral, store.EphemeralSequential} {
			if _, err := st.Create(ctx(t), store.Join(p, "child"), nil, mode); !errors.Is(err, store.ErrEphemeralChild) {
				t.Errorf("Create child of ephemeral (%v): %v, want ErrEphemeralChild", mode, err)
			}
		}
	})
}

package storetest

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

var suffix = regexp.MustCompile(`^(.*?)(\d{10})$`)

// seqOf splits a sequential node's path into prefix and counter, failing when
// the suffix is not 10 digits.
func seqOf(t *testing.T, p string) (string, int) {
	t.Helper()
	m := suffix.FindStringSubmatch(p)
	if m == nil {
		t.Fatalf("sequential path %q does not end in a 10-digit counter", p)
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		t.Fatalf("sequential path %q: %v", p, err)
	}
	return m[1], n
}

func (s *suite) sequential(t *testing.T) {
	parallel(t, "the suffix counts from 0, 10 digits zero-padded", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		q := mustCreate(t, st, store.Join(root, "q"), nil, store.Persistent)
		prefix := store.Join(q, "item-")
		for want := 0; want < 3; want++ {
			got := mustCreate(t, st, prefix, []byte{byte(want)}, store.PersistentSequential)
			pre, n := seqOf(t, got)
			if pre != prefix || n != want {
				t.Fatalf("sequential create %d returned %q, want %s%010d", want, got, prefix, want)
			}
			if data, _ := mustGet(t, st, got); len(data) != 1 || data[0] != byte(want) {
				t.Fatalf("data of %s = %v, want [%d]", got, data, want)
			}
		}
	})

	// Measured on ZooKeeper 3.8: the suffix counts the parent's child
	// creations. A delete raises the parent's Cversion but not the suffix.
	parallel(t, "the counter counts child creations and never goes back after deletes", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		q := mustCreate(t, st, store.Join(root, "q"), nil, store.Persistent)
		prefix := store.Join(q, "n-")
		var last []string
		for range 3 {
			last = append(last, mustCreate(t, st, prefix, nil, store.EphemeralSequential))
		}
		mustCreate(t, st, store.Join(q, "plain"), nil, store.Persistent) // a plain child counts too
		if err := st.Delete(ctx(t), last[2], store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		got := mustCreate(t, st, prefix, nil, store.PersistentSequential)
		_, n := seqOf(t, got)
		if n != 4 {
			t.Fatalf("after 3 sequential creates, 1 plain create and 1 delete the next suffix is %d (%s), want 4", n, got)
		}
		for _, p := range last {
			if _, m := seqOf(t, p); m >= n {
				t.Fatalf("suffix %d of %s is not below the later %d", m, p, n)
			}
		}
		// A refused create and a failed Multi do not advance the counter.
		if _, err := st.Create(ctx(t), store.Join(q, "plain"), nil, store.Persistent); err == nil {
			t.Fatal("second Create of plain succeeded")
		}
		_, err := st.Multi(ctx(t),
			&store.CreateOp{Path: store.Join(q, "m"), Mode: store.Persistent},
			&store.CheckOp{Path: store.Join(q, "missing"), Version: store.AnyVersion})
		if err == nil {
			t.Fatal("Multi with a failing CheckOp succeeded")
		}
		// A Multi that creates and deletes a child advances it by one.
		if _, err := st.Multi(ctx(t),
			&store.CreateOp{Path: store.Join(q, "m"), Mode: store.Persistent},
			&store.DeleteOp{Path: store.Join(q, "m"), Version: store.AnyVersion}); err != nil {
			t.Fatal(err)
		}
		got = mustCreate(t, st, prefix, nil, store.PersistentSequential)
		if _, n := seqOf(t, got); n != 6 {
			t.Fatalf("after a refused create, a failed Multi and a create+delete Multi the next suffix is %d (%s), want 6", n, got)
		}
	})

	parallel(t, "sorted children are in creation order", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		q := mustCreate(t, st, store.Join(root, "q"), nil, store.Persistent)
		var created []string
		for range 12 {
			created = append(created, store.Base(mustCreate(t, st, store.Join(q, "x"), nil, store.EphemeralSequential)))
		}
		names, _, err := st.Children(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != len(created) {
			t.Fatalf("Children = %q, want %q", names, created)
		}
		for i := range names {
			if names[i] != created[i] {
				t.Fatalf("Children = %q, want creation order %q", names, created)
			}
		}
	})

	parallel(t, "sequential creates from several sessions get distinct suffixes", func(t *testing.T) {
		a, b, root := s.open(t), s.open(t), s.h.Root(t)
		q := mustCreate(t, a, store.Join(root, "q"), nil, store.Persistent)
		seen := map[string]bool{}
		for i := range 6 {
			st := a
			if i%2 == 1 {
				st = b
			}
			p := mustCreate(t, st, store.Join(q, "lock-"), nil, store.EphemeralSequential)
			if seen[p] {
				t.Fatalf("suffix reused: %s", p)
			}
			seen[p] = true
		}
	})
}

func (s *suite) stat(t *testing.T) {
	parallel(t, "Czxid equals Mzxid at creation and grows across nodes", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		a := mustCreate(t, st, store.Join(root, "a"), nil, store.Persistent)
		b := mustCreate(t, st, store.Join(root, "b"), nil, store.Persistent)
		_, sa := mustGet(t, st, a)
		_, sb := mustGet(t, st, b)
		if sa.Czxid == 0 || sa.Czxid != sa.Mzxid {
			t.Fatalf("fresh node Czxid %d Mzxid %d, want equal and non-zero", sa.Czxid, sa.Mzxid)
		}
		if sb.Czxid <= sa.Czxid {
			t.Fatalf("later node Czxid %d not above earlier %d", sb.Czxid, sa.Czxid)
		}
		if sa.Ctime.IsZero() || !sa.Mtime.Equal(sa.Ctime) {
			t.Fatalf("fresh node Ctime %v Mtime %v, want equal and set", sa.Ctime, sa.Mtime)
		}
	})

	parallel(t, "Set raises Version and Mzxid above every earlier zxid and keeps Czxid and Ctime", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		a := mustCreate(t, st, store.Join(root, "a"), nil, store.Persistent)
		b := mustCreate(t, st, store.Join(root, "b"), nil, store.Persistent)
		_, before := mustGet(t, st, a)
		_, sb := mustGet(t, st, b)
		set, err := st.Set(ctx(t), a, []byte("x"), 0)
		if err != nil {
			t.Fatal(err)
		}
		_, after := mustGet(t, st, a)
		if after != set {
			t.Fatalf("Set returned %+v, Get reads %+v", set, after)
		}
		if after.Version != 1 || after.Czxid != before.Czxid || !after.Ctime.Equal(before.Ctime) {
			t.Fatalf("after Set %+v, want version 1 and the creation fields of %+v", after, before)
		}
		if after.Mzxid <= after.Czxid || after.Mzxid <= sb.Mzxid {
			t.Fatalf("Mzxid %d after Set, want above Czxid %d and the later node's %d", after.Mzxid, after.Czxid, sb.Mzxid)
		}
		if after.Mtime.Before(after.Ctime) {
			t.Fatalf("Mtime %v before Ctime %v", after.Mtime, after.Ctime)
		}
		again, err := st.Set(ctx(t), a, []byte("y"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if again.Version != 2 || again.Mzxid <= after.Mzxid {
			t.Fatalf("second Set: version %d Mzxid %d, want 2 and above %d", again.Version, again.Mzxid, after.Mzxid)
		}
	})

	parallel(t, "child changes raise Cversion and NumChildren but not the parent's Version or Mzxid", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		p := mustCreate(t, st, store.Join(root, "p"), nil, store.Persistent)
		_, before := mustGet(t, st, p)
		c1 := mustCreate(t, st, store.Join(p, "c1"), nil, store.Persistent)
		mustCreate(t, st, store.Join(p, "c2"), nil, store.Ephemeral)
		_, two := mustGet(t, st, p)
		if two.NumChildren != 2 || two.Cversion != 2 {
			t.Fatalf("after 2 creates: NumChildren %d Cversion %d, want 2 and 2", two.NumChildren, two.Cversion)
		}
		if err := st.Delete(ctx(t), c1, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		_, one := mustGet(t, st, p)
		if one.NumChildren != 1 || one.Cversion != 3 {
			t.Fatalf("after a delete: NumChildren %d Cversion %d, want 1 and 3", one.NumChildren, one.Cversion)
		}
		if one.Version != 0 || one.Mzxid != before.Mzxid {
			t.Fatalf("parent Version %d Mzxid %d changed by child ops, want 0 and %d", one.Version, one.Mzxid, before.Mzxid)
		}
		if before.Pzxid != before.Czxid || two.Pzxid <= before.Pzxid || one.Pzxid <= two.Pzxid {
			t.Fatalf("Pzxid %d (Czxid %d), %d after 2 creates, %d after a delete: want the creation's, then growing with each child change",
				before.Pzxid, before.Czxid, two.Pzxid, one.Pzxid)
		}
		// A child's data change is not a change of the parent's children.
		if _, err := st.Set(ctx(t), store.Join(p, "c2"), []byte("x"), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if _, still := mustGet(t, st, p); still.Pzxid != one.Pzxid {
			t.Fatalf("Pzxid %d after a child's Set, want %d unchanged", still.Pzxid, one.Pzxid)
		}
	})

	parallel(t, "EphemeralOwner is the session id for ephemerals and 0 otherwise", func(t *testing.T) {
		st, root := s.open(t), s.h.Root(t)
		sess, _ := st.Session()
		if sess.ID == 0 {
			t.Fatal("connected session has id 0")
		}
		e := mustCreate(t, st, store.Join(root, "e"), nil, store.Ephemeral)
		es := mustCreate(t, st, store.Join(root, "es-"), nil, store.EphemeralSequential)
		p := mustCreate(t, st, store.Join(root, "p"), nil, store.Persistent)
		for _, c := range []struct {
			path  string
			owner int64
		}{{e, sess.ID}, {es, sess.ID}, {p, 0}} {
			if got := mustExist(t, st, c.path, true); got.EphemeralOwner != c.owner {
				t.Errorf("%s EphemeralOwner 0x%x, want 0x%x", c.path, got.EphemeralOwner, c.owner)
			}
		}
	})
}

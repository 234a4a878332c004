package store_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJoin(t *testing.T) {
	for _, c := range []struct {
		elem []string
		want string
	}{
		{nil, "/"},
		{[]string{""}, "/"},
		{[]string{"/"}, "/"},
		{[]string{"a"}, "/a"},
		{[]string{"/a", "b"}, "/a/b"},
		{[]string{"/a/", "/b/", "c"}, "/a/b/c"},
		{[]string{"ns", "", "job", "config"}, "/ns/job/config"},
		{[]string{"/", "sharding", "0"}, "/sharding/0"},
	} {
		if got := store.Join(c.elem...); got != c.want {
			t.Errorf("Join(%q) = %q, want %q", c.elem, got, c.want)
		}
	}
}

func TestParentAndBase(t *testing.T) {
	for _, c := range []struct{ path, parent, base string }{
		{"/", "/", ""},
		{"/a", "/", "a"},
		{"/a/b", "/a", "b"},
		{"/ns/job/sharding/0/running", "/ns/job/sharding/0", "running"},
	} {
		if got := store.Parent(c.path); got != c.parent {
			t.Errorf("Parent(%q) = %q, want %q", c.path, got, c.parent)
		}
		if got := store.Base(c.path); got != c.base {
			t.Errorf("Base(%q) = %q, want %q", c.path, got, c.base)
		}
	}
}

func TestValidatePath(t *testing.T) {
	for _, ok := range []string{"/", "/a", "/a/b", "/a.b/c-d_e", "/n/0000000001", "/.hidden", "/a/..b"} {
		if err := store.ValidatePath(ok); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a", "a/b", "/a/", "//", "/a//b", "/./a", "/a/..", "/a/./b"} {
		err := store.ValidatePath(bad)
		if !errors.Is(err, store.ErrBadPath) {
			t.Errorf("ValidatePath(%q) = %v, want ErrBadPath", bad, err)
			continue
		}
		if bad != "" && !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ValidatePath(%q) error %q does not name the path", bad, err)
		}
	}
	// Every request's paths are checked: a valid one costs nothing.
	if n := testing.AllocsPerRun(100, func() { _ = store.ValidatePath("/ns/job/servers/s1/run/live") }); n != 0 {
		t.Errorf("ValidatePath of a valid path: %v allocations, want 0", n)
	}
}

func session(t *testing.T) (*memstore.Server, store.Store) {
	t.Helper()
	srv := memstore.NewServer()
	s := srv.Connect()
	t.Cleanup(func() { _ = s.Close() })
	return srv, s
}

func TestCreateAllMakesMissingAncestorsOnly(t *testing.T) {
	ctx := context.Background()
	_, s := session(t)
	if _, err := s.Create(ctx, "/a", []byte("keep"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateAll(ctx, s, "/a/b/c"); err != nil {
		t.Fatalf("CreateAll: %v", err)
	}
	for _, p := range []string{"/a/b", "/a/b/c"} {
		ok, st, err := s.Exists(ctx, p)
		if err != nil || !ok {
			t.Fatalf("Exists %s = %v, %v", p, ok, err)
		}
		if st.EphemeralOwner != 0 {
			t.Fatalf("%s is ephemeral, want persistent", p)
		}
	}
	data, st, err := s.Get(ctx, "/a")
	if err != nil || string(data) != "keep" || st.Version != 0 {
		t.Fatalf("existing ancestor /a: %q version %d err %v, want untouched", data, st.Version, err)
	}
	if err := store.CreateAll(ctx, s, "/a/b/c"); err != nil {
		t.Fatalf("CreateAll on an existing path: %v", err)
	}
	if err := store.CreateAll(ctx, s, "/"); err != nil {
		t.Fatalf("CreateAll(/): %v", err)
	}
}

func TestCreateAllStopsUnderAnEphemeral(t *testing.T) {
	ctx := context.Background()
	_, s := session(t)
	if _, err := s.Create(ctx, "/e", nil, store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateAll(ctx, s, "/e/x/y"); !errors.Is(err, store.ErrEphemeralChild) {
		t.Fatalf("CreateAll under an ephemeral: %v, want ErrEphemeralChild", err)
	}
}

func TestCreateAllIsSafeConcurrently(t *testing.T) {
	ctx := context.Background()
	srv, _ := session(t)
	const n = 8
	errs := make(chan error, n)
	for range n {
		s := srv.Connect()
		t.Cleanup(func() { _ = s.Close() })
		go func() { errs <- store.CreateAll(ctx, s, "/ns/job/servers/host") }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent CreateAll: %v", err)
		}
	}
}

func TestDeleteAllRemovesTheSubtreeOnly(t *testing.T) {
	ctx := context.Background()
	_, s := session(t)
	for _, p := range []string{"/ns/job/a/x", "/ns/job/b", "/ns/other"} {
		if err := store.CreateAll(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, "/ns/job/a/eph", nil, store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteAll(ctx, s, "/ns/job"); err != nil {
		t.Fatalf("DeleteAll: %v", err)
	}
	children, _, err := s.Children(ctx, "/ns")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(children, []string{"other"}) {
		t.Fatalf("children of /ns after DeleteAll = %q, want [other]", children)
	}
	if err := store.DeleteAll(ctx, s, "/ns/job"); err != nil {
		t.Fatalf("DeleteAll of a missing path: %v", err)
	}
}

func TestPathHelpersPassErrorsThrough(t *testing.T) {
	_, s := session(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := store.CreateAll(done, s, "/a/b"); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateAll with a cancelled context: %v, want context.Canceled", err)
	}
	if err := store.DeleteAll(done, s, "/a"); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteAll with a cancelled context: %v, want context.Canceled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateAll(context.Background(), s, "/a"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("CreateAll after Close: %v, want ErrClosed", err)
	}
}

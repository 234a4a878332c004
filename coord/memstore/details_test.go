package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// As in ZooKeeper, a sequential create may end in "/": the counter becomes
// the whole last element.
func TestSequentialCreateUnderTrailingSlash(t *testing.T) {
	ctx := context.Background()
	s := connect(t, memstore.NewServer())
	if _, err := s.Create(ctx, "/q", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	got, err := s.Create(ctx, "/q/", nil, store.PersistentSequential)
	if err != nil || got != "/q/0000000000" {
		t.Fatalf("Create /q/ sequential = %q, %v; want /q/0000000000", got, err)
	}
	if _, err := s.Create(ctx, "/q/", nil, store.Persistent); !errors.Is(err, store.ErrBadPath) {
		t.Fatalf("non-sequential Create /q/: %v, want ErrBadPath", err)
	}
}

func TestRootCannotBeCreatedOrDeleted(t *testing.T) {
	ctx := context.Background()
	s := connect(t, memstore.NewServer())
	if _, err := s.Create(ctx, "/", nil, store.Persistent); !errors.Is(err, store.ErrNodeExists) {
		t.Fatalf("Create /: %v, want ErrNodeExists", err)
	}
	if err := s.Delete(ctx, "/", store.AnyVersion); !errors.Is(err, store.ErrBadPath) {
		t.Fatalf("Delete /: %v, want ErrBadPath", err)
	}
}

func TestMultiRefusesNilAndForeignOps(t *testing.T) {
	ctx := context.Background()
	s := connect(t, memstore.NewServer())
	var nilSet *store.SetOp
	for _, bad := range []store.Op{nil, nilSet, foreignOp{}} {
		ops := []store.Op{&store.CreateOp{Path: "/x", Mode: store.Persistent}, bad}
		_, err := s.Multi(ctx, ops...)
		var me *store.MultiError
		if !errors.As(err, &me) || me.Index != 1 {
			t.Fatalf("Multi with %#v: %v, want a MultiError at index 1", bad, err)
		}
		if ok, _, _ := s.Exists(ctx, "/x"); ok {
			t.Fatalf("Multi with %#v applied its first op", bad)
		}
	}
	if res, err := s.Multi(ctx); err != nil || len(res) != 0 {
		t.Fatalf("empty Multi = %v, %v; want no results, nil", res, err)
	}
}

type foreignOp struct{ store.Op }

func TestErrorsNameThePath(t *testing.T) {
	ctx := context.Background()
	s := connect(t, memstore.NewServer())
	if _, err := s.Create(ctx, "/p", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/p/c", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, noParent := s.Create(ctx, "/missing/child", nil, store.Persistent)
	_, exists := s.Create(ctx, "/p/c", nil, store.Persistent)
	notEmpty := s.Delete(ctx, "/p", store.AnyVersion)
	_, badVersion := s.Set(ctx, "/p/c", nil, 9)
	for _, c := range []struct {
		err  error
		path string
	}{{noParent, "/missing/child"}, {exists, "/p/c"}, {notEmpty, "/p"}, {badVersion, "/p/c"}} {
		if c.err == nil || !strings.Contains(c.err.Error(), `"`+c.path+`"`) {
			t.Errorf("error %v does not name %q", c.err, c.path)
		}
	}
}

// Expire on a connected handle reports the change (the old id is gone) and
// leaves it connected on a new session.
func TestExpireReportsTheChangeAndReconnects(t *testing.T) {
	s := connect(t, memstore.NewServer())
	before, changed := s.Session()
	s.Expire()
	select {
	case <-changed:
	default:
		t.Fatal("Expire did not close the Session() channel")
	}
	after, _ := s.Session()
	if after.State != store.StateConnected || after.ID == before.ID || after.ID != s.ID() {
		t.Fatalf("after Expire: %+v (ID() 0x%x), want connected on a new id (old 0x%x)", after, s.ID(), before.ID)
	}
}

func TestClosedSessionIgnoresFaultHooks(t *testing.T) {
	srv := memstore.NewServer()
	s := srv.Connect()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Disconnect()
	s.Reconnect()
	s.Expire()
	if cur, _ := s.Session(); cur.State != store.StateClosed {
		t.Fatalf("state %v after fault hooks on a closed session, want closed", cur.State)
	}
	if st := srv.Stats(); st.Sessions != 0 {
		t.Fatalf("%d live sessions, want 0", st.Sessions)
	}
}

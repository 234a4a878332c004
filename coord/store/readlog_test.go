package store_test

import (
	"context"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// TestReadLogProvesOnlyOneStoreAndSession: reads recorded by two stores,
// or under two sessions, prove nothing; none recorded, neither.
func TestReadLogProvesOnlyOneStoreAndSession(t *testing.T) {
	ctx := context.Background()
	if store.ReadLogFrom(ctx) != nil {
		t.Fatal("a log from a context without one")
	}
	l := &store.ReadLog{}
	if store.ReadLogFrom(store.WithReadLog(ctx, l)) != l {
		t.Fatal("the log carried is not the one given")
	}
	if _, _, _, ok := l.Reads(); ok {
		t.Fatal("an empty log proves something")
	}
	l.Record("a", 1, store.Read{Path: "/x", Exists: true})
	l.Record("a", 1, store.Read{Path: "/y"})
	if o, s, r, ok := l.Reads(); !ok || o != "a" || s != 1 || len(r) != 2 || r[1].Path != "/y" {
		t.Fatalf("Reads = %q %d %v %v", o, s, r, ok)
	}
	for _, other := range []struct {
		origin  string
		session int64
	}{{"b", 1}, {"a", 2}} {
		m := &store.ReadLog{}
		m.Record("a", 1, store.Read{Path: "/x"})
		m.Record(other.origin, other.session, store.Read{Path: "/y"})
		if _, _, _, ok := m.Reads(); ok {
			t.Errorf("reads of %+v and (a, 1) prove something", other)
		}
	}
}

package treecache

import (
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// The tree cache keeps what its watch policy says and nothing else: a
// node with a data watch follows its writes, a node the policy leaves out
// is only known to exist.
func TestTreeCacheFollowsItsPolicy(t *testing.T) {
	ctx := t.Context()
	sess := memstore.NewServer().Connect()
	t.Cleanup(func() { _ = sess.Close() })
	for _, p := range []string{"/t/a", "/t/b"} {
		if err := store.CreateAll(ctx, sess, p); err != nil {
			t.Fatal(err)
		}
	}
	pol := Policy{
		Roots: []string{""},
		Node: func(rel string) (data, children bool) {
			switch rel {
			case "":
				return false, true
			case "a":
				return true, false
			}
			return false, false
		},
		Items: "items",
	}
	type fired struct {
		ref WatchRef
		ev  store.Event
	}
	events := make(chan fired, 16)
	c := New(sess, store.FuncWatcherOf(sess), "/t", pol, func(ref WatchRef, ev store.Event) { events <- fired{ref, ev} }, nil)
	if err := c.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Has("a") || !c.Has("b") {
		t.Fatalf("children of the root: %v, want a and b", c.Children(""))
	}
	if _, _, ok := c.Get("b"); ok {
		t.Fatal("b's data is kept, but the policy gives it no data watch")
	}
	c.mu.RLock()
	if n := c.nodes["b"]; n != nil && (n.dataW != 0 || n.childW != 0) {
		t.Fatalf("b is watched (%+v), but the policy gives it no watch", n)
	}
	if n := c.nodes["a"]; n == nil || n.dataW == 0 || n.childW != 0 {
		t.Fatalf("a's watches: %+v, want a data watch only", n)
	}
	c.mu.RUnlock()
	// b's creation is seen through the root's children watch; write to b
	// and a: only a's data watch fires.
	if _, err := sess.Set(ctx, "/t/b", []byte("1"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Set(ctx, "/t/a", []byte("2"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	f := testwait.Recv(t, 10*time.Second, "a's data watch", events)
	if f.ref.Rel != "a" || f.ref.kind != watchData || f.ev.Type != store.EventNodeDataChanged {
		t.Fatalf("first watch event %+v, want a's data watch on a's Set", f)
	}
	if err := c.Handle(ctx, f.ref, f.ev); err != nil {
		t.Fatal(err)
	}
	if d, _, ok := c.Get("a"); !ok || string(d) != "2" {
		t.Fatalf("a after the write: %q (%v), want 2", d, ok)
	}
}

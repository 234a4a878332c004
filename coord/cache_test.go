package coord

import (
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
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
	pol := watchPolicy{
		roots: []string{""},
		node: func(rel string) (data, children bool) {
			switch rel {
			case "":
				return false, true
			case "a":
				return true, false
			}
			return false, false
		},
		items: "items",
	}
	c := newTreeCache(sess, "/t", pol, nil)
	if err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.has("a") || !c.has("b") {
		t.Fatalf("children of the root: %v, want a and b", c.children(""))
	}
	if _, _, ok := c.get("b"); ok {
		t.Fatal("b's data is kept, but the policy gives it no data watch")
	}
	var refs []watchRef
	for _, r := range c.watches(nil) {
		if r.rel == "b" {
			t.Fatalf("b is watched (%v), but the policy gives it no watch", r.kind)
		}
		if r.rel == "a" && r.kind == watchData {
			refs = append(refs, r)
		}
	}
	if len(refs) != 1 {
		t.Fatalf("a's data watches: %d, want 1", len(refs))
	}
	if _, err := sess.Set(ctx, "/t/a", []byte("2"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-refs[0].ch:
		if err := c.handle(ctx, refs[0], ev); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a's data watch did not fire")
	}
	if d, _, ok := c.get("a"); !ok || string(d) != "2" {
		t.Fatalf("a after the write: %q (%v), want 2", d, ok)
	}
}

package coordtest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Before sees each hooked call first and can fail it unmade; After sees
// its outcome and can replace it, dropping the results.
func TestHookStore(t *testing.T) {
	sess := memstore.NewServer().Connect()
	defer sess.Close()
	lost := errors.New("lost")
	var seen []string
	hs := &HookStore{Store: sess,
		Before: func(_ context.Context, c Call) error {
			seen = append(seen, "before "+c.Method+" "+c.Path)
			if c.Path == "/refused" {
				return lost
			}
			return nil
		},
		After: func(_ context.Context, c Call, err error) error {
			seen = append(seen, "after "+c.Method+" "+c.Path)
			if c.Method == "Get" {
				return lost
			}
			return err
		},
	}
	ctx := t.Context()
	if _, err := hs.Create(ctx, "/a", []byte("x"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Create(ctx, "/refused", nil, store.Persistent); !errors.Is(err, lost) {
		t.Fatalf("Create refused by Before = %v, want its error", err)
	}
	if ok, _, err := sess.Exists(ctx, "/refused"); err != nil || ok {
		t.Fatalf("a call Before refused was made: exists %v, %v", ok, err)
	}
	if data, _, err := hs.Get(ctx, "/a"); !errors.Is(err, lost) || data != nil {
		t.Fatalf("Get with its reply replaced = %q, %v; want no data and After's error", data, err)
	}
	if names, _, err := hs.Children(ctx, "/"); err != nil || !slices.Contains(names, "a") {
		t.Fatalf("Children = %v, %v", names, err)
	}
	if names, _, watch, err := hs.ChildrenW(ctx, "/"); err != nil || !slices.Contains(names, "a") || watch == nil {
		t.Fatalf("ChildrenW = %v, %v, %v", names, watch, err)
	}
	if ok, _, watch, err := hs.ExistsW(ctx, "/a"); err != nil || !ok || watch == nil {
		t.Fatalf("ExistsW = %v, %v, %v", ok, watch, err)
	}
	if _, err := hs.Multi(ctx, &store.SetOp{Path: "/a", Data: []byte("y"), Version: store.AnyVersion}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"before Create /a", "after Create /a", "before Create /refused",
		"before Get /a", "after Get /a", "before Children /", "after Children /",
		"before ChildrenW /", "after ChildrenW /", "before ExistsW /a", "after ExistsW /a",
		"before Multi ", "after Multi ",
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("hooks saw %q\nwant %q", seen, want)
	}
	if data, _, _ := sess.Get(ctx, "/a"); string(data) != "y" {
		t.Fatalf("the Multi was not made: /a = %q", data)
	}
}

// OnNext runs once, ahead of the next call of its method on its path (any
// path when ""); arming again for the same call replaces the hook.
func TestHookStoreOnNext(t *testing.T) {
	sess := memstore.NewServer().Connect()
	defer sess.Close()
	hs := &HookStore{Store: sess}
	var fired []string
	ctx := t.Context()
	for _, p := range []string{"/a", "/b"} {
		if _, err := sess.Create(ctx, p, nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	hs.OnNext("Get", "/a", func() { fired = append(fired, "replaced") })
	hs.OnNext("Get", "/a", func() { fired = append(fired, "get /a") })
	hs.OnNext("Multi", "", func() { fired = append(fired, "multi") })
	for _, p := range []string{"/b", "/a", "/a"} {
		if _, _, err := hs.Get(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := hs.Multi(ctx, &store.CheckOp{Path: "/a", Version: store.AnyVersion}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"get /a", "multi"}; !slices.Equal(fired, want) {
		t.Fatalf("armed hooks ran %q, want %q", fired, want)
	}
}

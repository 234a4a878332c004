package coord_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// hookStore lets a test pause a server between its store calls.
type hookStore struct {
	store.Store
	create   func(path string, next func() (string, error)) (string, error)
	children func(path string)
}

func (h *hookStore) Create(ctx context.Context, path string, data []byte, mode store.Mode) (string, error) {
	next := func() (string, error) { return h.Store.Create(ctx, path, data, mode) }
	if h.create != nil {
		return h.create(path, next)
	}
	return next()
}

func (h *hookStore) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	if h.children != nil {
		h.children(path)
	}
	return h.Store.Children(ctx, path)
}

// TestOnceBarrierRunsOnceWhenTwoServersSeeTheSetComplete forces: a and b both register; both read the
// complete set; a takes the runner, runs the callback, clears the set and
// releases the runner; only then does b create the runner. b must see that
// its registration was cleared and not run the callback a second time.
func TestOnceBarrierRunsOnceWhenTwoServersSeeTheSetComplete(t *testing.T) {
	b := coordtest.Mem()
	h := coordtest.NewHarness(t, b)
	const base = "/guarantee/started"
	aRegistered, bRegistered, bAtRunner, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var onceRegA, onceReg, onceAt sync.Once
	// The hooks are in place before the servers start (their watchers call
	// the store too) and act only on the barrier's paths.
	saChildren := func(p string) {
		if strings.HasSuffix(p, base) {
			<-bRegistered
		}
	}
	saCreate := func(p string, next func() (string, error)) (string, error) {
		if strings.HasSuffix(p, base+"/runner") {
			<-bAtRunner
			return next()
		}
		r, err := next()
		if strings.Contains(p, base+"/") {
			onceRegA.Do(func() { close(aRegistered) })
		}
		return r, err
	}
	sbChildren := func(p string) {
		if strings.HasSuffix(p, base) {
			<-aRegistered
		}
	}
	sbCreate := func(p string, next func() (string, error)) (string, error) {
		if strings.HasSuffix(p, base+"/runner") {
			onceAt.Do(func() { close(bAtRunner) })
			<-aDone
			return next()
		}
		r, err := next()
		if strings.Contains(p, base+"/") {
			onceReg.Do(func() { close(bRegistered) })
		}
		return r, err
	}
	sa := &hookStore{Store: b.Connect(t), create: saCreate, children: saChildren}
	sb := &hookStore{Store: b.Connect(t), create: sbCreate, children: sbChildren}
	a, err := h.TryStart("a", coordtest.Config("job", 2), sa)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := h.TryStart("b", coordtest.Config("job", 2), sb)
	if err != nil {
		t.Fatal(err)
	}
	runs := coordtest.BeginAll(t, a, bs)
	items := func(i int) []int {
		var out []int
		for _, s := range runs[i].Shards() {
			out = append(out, s.Item)
		}
		return out
	}
	ia, ib := items(0), items(1)
	t.Logf("a items %v, b items %v", ia, ib)
	if len(ia) == 0 || len(ib) == 0 {
		t.Fatalf("two servers over two items: want one item each, got a %v, b %v", ia, ib)
	}
	var calls atomic.Int64
	fn := func(context.Context) error { calls.Add(1); return nil }
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(aDone)
		if err := a.Job.Once(context.Background(), "started", ia, 5*time.Second, fn); err != nil {
			t.Errorf("a: %v", err)
		}
	})
	wg.Go(func() {
		if err := bs.Job.Once(context.Background(), "started", ib, 5*time.Second, fn); err != nil {
			t.Errorf("b: %v", err)
		}
	})
	wg.Wait()
	t.Logf("callback ran %d times", calls.Load())
	if calls.Load() != 1 {
		t.Errorf("callback ran %d times for one barrier, want 1", calls.Load())
	}
	coordtest.CompleteAll(t, runs...)
}

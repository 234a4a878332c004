package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// recorder is the commit of the Queue tests: it records the names (Meta)
// of each batch's requests, holds the first batch until release is closed,
// and replies with no results.
type recorder struct {
	release chan struct{}

	mu      sync.Mutex
	held    bool
	batches [][]string
}

func (c *recorder) commit(batch []*groupcommit.Request[string]) {
	c.mu.Lock()
	names := make([]string, len(batch))
	for i, r := range batch {
		names[i] = r.Meta
	}
	c.batches = append(c.batches, names)
	hold := !c.held
	c.held = true
	c.mu.Unlock()
	if hold {
		<-c.release
	}
	for _, r := range batch {
		r.Reply(nil, nil)
	}
}

// sent returns the batches so far, as "[a b] [c]".
func (c *recorder) sent() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, b := range c.batches {
		s = append(s, fmt.Sprint(b))
	}
	return strings.Join(s, " ")
}

// queued is a request of the Queue tests: its name, its keys (an
// operation on /key/x each), its operations' count (at least its keys').
type queued struct {
	name string
	keys []string
	ops  int
	ctx  context.Context
}

// queue returns a Queue keyed by a path's first segment, committing
// through a recorder.
func queue(cfg groupcommit.QueueConfig[string]) (*groupcommit.Queue[string], *recorder) {
	c := &recorder{release: make(chan struct{})}
	cfg.Keys = func(ops []store.Op) ([]string, bool) {
		var ks []string
		for _, op := range ops {
			k, _, _ := strings.Cut(strings.TrimPrefix(store.OpPath(op), "/"), "/")
			ks = append(ks, k)
		}
		return ks, false
	}
	return groupcommit.NewQueue(c.commit, cfg), c
}

// queueAll sends a blocker on key "held" and waits until the recorder
// holds it, then sends reqs in order, each queued before the next; it
// returns each request's error (the blocker's last) once release is
// called and all have returned.
func queueAll(q *groupcommit.Queue[string], c *recorder, reqs []queued) (release func() []error) {
	errs := make([]error, len(reqs)+1)
	var wg sync.WaitGroup
	do := func(i int, r queued) {
		ops := make([]store.Op, max(r.ops, len(r.keys)))
		for j := range ops {
			ops[j] = &store.CheckOp{Path: "/" + r.keys[j%len(r.keys)] + "/x"}
		}
		ctx := r.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = q.Do(ctx, ops, r.name)
		}()
		synctest.Wait()
	}
	do(len(reqs), queued{name: "blocker", keys: []string{"held"}})
	for i, r := range reqs {
		do(i, r)
	}
	return func() []error {
		close(c.release)
		wg.Wait()
		return errs
	}
}

// TestQueueWithdrawnFromTheMiddle: requests whose callers give up while
// queued leave the queue wherever they are: the first of a key's line
// (the next of that key takes its place, in the same batch as the others)
// or one in the middle of a line (the one after it still waits for the
// one before).
func TestQueueWithdrawnFromTheMiddle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, c := queue(groupcommit.QueueConfig[string]{})
		ctxB, cancelB := context.WithCancel(context.Background())
		ctxF, cancelF := context.WithCancel(context.Background())
		release := queueAll(q, c, []queued{
			{name: "a", keys: []string{"a"}},
			{name: "b1", keys: []string{"b"}, ctx: ctxB},
			{name: "b2", keys: []string{"b"}},
			{name: "e1", keys: []string{"e"}},
			{name: "e2", keys: []string{"e"}, ctx: ctxF},
			{name: "e3", keys: []string{"e"}},
			{name: "c", keys: []string{"c"}},
		})
		cancelB()
		cancelF()
		synctest.Wait()
		if _, n := q.Pending(); n != 5 {
			t.Fatalf("%d queued after two withdrawals, want 5", n)
		}
		errs := release()
		for i, err := range errs {
			if want := i == 1 || i == 4; errors.Is(err, context.Canceled) != want {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if got, want := c.sent(), "[blocker] [a b2 e1 c] [e3]"; got != want {
			t.Fatalf("batches %s, want %s", got, want)
		}
	})
}

// TestQueueBehindALongLine: a thousand requests of a key held by the
// batch in flight, then a thousand of one other key, hold back no request
// of another key queued after them: it goes in the next batch, beside the
// first of each line, however far down the queue it is.
func TestQueueBehindALongLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, c := queue(groupcommit.QueueConfig[string]{})
		var reqs []queued
		for i := range 1000 {
			reqs = append(reqs, queued{name: fmt.Sprint("held", i), keys: []string{"held"}})
		}
		for i := range 1000 {
			reqs = append(reqs, queued{name: fmt.Sprint("hot", i), keys: []string{"hot"}})
		}
		reqs = append(reqs, queued{name: "free", keys: []string{"free"}})
		for i, err := range queueAll(q, c, reqs)() {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		batches := strings.Split(c.sent(), " [")
		if len(batches) != 1001 || batches[1] != "held0 hot0 free]" || batches[1000] != "held999 hot999]" {
			t.Fatalf("%d batches, the second [%s, the last [%s; want 1001, [held0 hot0 free], [held999 hot999]",
				len(batches), batches[1], batches[len(batches)-1])
		}
	})
}

// TestQueueManyKeys: a request of a hundred keys waits for the request
// before it that shares one of them, and every request after it sharing
// one waits for it; requests of other keys pass them all.
func TestQueueManyKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, c := queue(groupcommit.QueueConfig[string]{})
		var many []string
		for i := range 100 {
			many = append(many, fmt.Sprint("k", i))
		}
		reqs := []queued{
			{name: "p", keys: []string{"k50"}},
			{name: "many", keys: many},
		}
		for i := range 100 {
			reqs = append(reqs, queued{name: fmt.Sprint("r", i), keys: []string{fmt.Sprint("k", i)}})
			if i%10 == 0 {
				reqs = append(reqs, queued{name: fmt.Sprint("s", i), keys: []string{fmt.Sprint("s", i)}})
			}
		}
		for i, err := range queueAll(q, c, reqs)() {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		var rs []string
		for i := range 100 {
			rs = append(rs, fmt.Sprint("r", i))
		}
		want := "[blocker] [p s0 s10 s20 s30 s40 s50 s60 s70 s80 s90] [many] [" + strings.Join(rs, " ") + "]"
		if got := c.sent(); got != want {
			t.Fatalf("batches %s, want %s", got, want)
		}
	})
}

// TestQueueFullBatch: the first request that would pass MaxOps ends the
// batch and goes first in the next (a smaller one after it waits too);
// one larger than MaxOps goes alone.
func TestQueueFullBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, c := queue(groupcommit.QueueConfig[string]{MaxOps: 5})
		for i, err := range queueAll(q, c, []queued{
			{name: "a", keys: []string{"a"}, ops: 3},
			{name: "b", keys: []string{"b"}, ops: 3},
			{name: "c", keys: []string{"c"}, ops: 1},
			{name: "d", keys: []string{"d"}, ops: 1},
			{name: "big", keys: []string{"e"}, ops: 9},
			{name: "f", keys: []string{"f"}, ops: 5},
		})() {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if got, want := c.sent(), "[blocker] [a] [b c d] [big] [f]"; got != want {
			t.Fatalf("batches %s, want %s", got, want)
		}
	})
}

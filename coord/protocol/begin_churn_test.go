package protocol_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// A Begin whose transactions are refused by more reshards than its attempts
// were once bounded by (4) plans again for as long as the store moves, and
// runs the share the last reshard gave it: a schedule's churn, 3-4 reshards
// and a leader change during one trigger, made that trigger an error
// (simulation seeds 54100134, 54100938 on ZooKeeper, 54200811 on Postgres).
// Each of b's transactions is held while a server joins or leaves (the
// leader once) and the leader reshards; released, it is refused by the flag
// or the sharding node's version. Every run begun after it, b's included,
// gets a disjoint share of the items. In a synctest bubble.
func TestBeginThroughChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		const total = 12
		cfg := coordtest.Config("job", total)
		sharding := store.Join(h.NS, "job", "servers", "b", "sharding")
		var hold atomic.Bool
		at, release := make(chan struct{}), make(chan struct{})
		hs := &coordtest.HookStore{Store: h.B.Connect(t), Before: func(ctx context.Context, c coordtest.Call) error {
			if !hold.Load() || !c.Checks(sharding) {
				return nil
			}
			select { // the test churns, then releases the transaction
			case at <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}}
		servers := map[string]*coordtest.Server{"a": h.Start("a", cfg), "x": h.Start("x", cfg)} // a leads, x is next
		b, err := h.TryStart("b", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, servers["a"], servers["x"], b)...)
		synctest.Wait()

		type begun struct {
			run *protocol.Run
			err error
		}
		done := make(chan begun, 1)
		hold.Store(true)
		go func() {
			r, err := b.Job.Begin(t.Context(), time.Now())
			done <- begun{r, err}
		}()
		churn := []string{"+c0", "-a", "+c1", "-c0", "+c2", "-c1"} // "-a": the leader leaves
		for i, step := range churn {
			select {
			case <-at:
			case res := <-done:
				t.Fatalf("b's Begin returned after %d reshards under it (%v): %v", i, churn[:i], res.err)
			}
			id := step[1:]
			if step[0] == '+' {
				servers[id] = h.Start(id, cfg)
			} else {
				servers[id].Stop(t)
				delete(servers, id)
			}
			synctest.Wait() // the leader's prompt reshard
			if i == len(churn)-1 {
				hold.Store(false)
			}
			release <- struct{}{}
		}
		res := <-done
		if res.err != nil {
			t.Fatalf("b's Begin after %d reshards under it: %v", len(churn), res.err)
		}
		runs := []*protocol.Run{res.run}
		for _, s := range servers {
			runs = append(runs, coordtest.BeginAll(t, s)...)
		}
		coordtest.AssertPartition(t, total, runs...)
		if len(res.run.Shards()) == 0 {
			t.Fatalf("b's run has no items of %d over %d servers", total, len(runs))
		}
		coordtest.CompleteAll(t, runs...)
	})
}

// A Begin whose transaction is refused on versions that did not move
// (nothing committed between its plans: here the store refuses it without
// making it) is no race: the same plan refused a second time stops the
// Begin with the refusal, where planning again would loop for ever. The
// next trigger runs the items.
func TestBeginStopsOnTheSamePlanRefusedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		sharding := store.Join(h.NS, "job", "servers", "a", "sharding")
		var refuse atomic.Bool
		var refused atomic.Int32
		hs := &coordtest.HookStore{Store: h.B.Connect(t), Before: func(_ context.Context, c coordtest.Call) error {
			if refuse.Load() && c.Checks(sharding) {
				refused.Add(1)
				return fmt.Errorf("refused by the test: %w", store.ErrBadVersion)
			}
			return nil
		}}
		a, err := h.TryStart("a", coordtest.Config("job", 2), hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
		synctest.Wait()
		refuse.Store(true)
		_, err = a.Job.Begin(t.Context(), time.Now())
		if n := refused.Load(); !errors.Is(err, store.ErrBadVersion) || n != 2 {
			t.Fatalf("Begin refused on unmoved versions: %v after %d transactions; want the refusal after 2 (the cache's plan, then the same plan read directly)", err, n)
		}
		refuse.Store(false)
		runs := coordtest.BeginAll(t, a)
		coordtest.AssertPartition(t, 2, runs...)
		coordtest.CompleteAll(t, runs...)
	})
}

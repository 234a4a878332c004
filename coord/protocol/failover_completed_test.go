package protocol_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// A failover run's Complete on another server creates the item's completed
// node and deletes its running node, which no watch of the item's owner
// reports: the owner's tree cache learns of it when the claim's failover
// node goes (its existence watch). An owner that loads the item just then
// (restarted under the same id while the failover run ran; here the
// Complete lands between its read of the item's children and of its
// flags) must not keep the item running and not completed: its next Begin
// would leave that completed node in place, and a crash of its run would
// leave the item looking completed, not queued for failover (the failover
// benchmark's idle kills: 4 of 10 ran again only at the new owner's next
// trigger, 0.5 s late). In a synctest bubble.
func TestBeginClearsCompletedOfFailoverRunElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 3, func(c *jobconfig.Config) { c.Failover = true })
		l := h.Start("l", cfg)
		a := h.Start("a", cfg)
		v := h.Start("v", cfg)
		runs := coordtest.BeginAll(t, l, a, v)
		parts := coordtest.AssertPartition(t, 3, runs...)
		items := parts[2]
		// l's run stays open until the end: the leader reshards only when
		// no item runs, so v's sharding node keeps v's item meanwhile.
		coordtest.CompleteAll(t, runs[1])
		h.B.Kill(t, v.St)
		h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's items queued for failover", func(q testsignal.Queued) bool {
			return slices.Equal(q.Items, items)
		})
		synctest.Wait() // a's cache has seen the queue entry
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || !ok {
			t.Fatalf("a's ClaimFailover = %v, %v; want v's item claimed", ok, err)
		}
		fo, err := a.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if sh := fo.Shards(); len(sh) != 1 || !sh[0].Failover || sh[0].Item != items[0] {
			t.Fatalf("a's run = %+v, want the failover run of v's item %d", sh, items[0])
		}
		// v comes back while the failover run runs, under the same id: its
		// tree cache loads its item, and the failover run completes right
		// after the read of the item's children.
		itemPath := store.Join(h.NS, "job", "execution", strconv.Itoa(items[0]))
		completedRead := false
		vst := h.B.Connect(t)
		hs := &coordtest.HookStore{Store: vst}
		hs.After = func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method == "Children" && c.Path == itemPath && !completedRead {
				completedRead = true
				coordtest.CompleteAll(t, fo)
			}
			return err
		}
		v, err = h.TryStart("v", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // v loaded the item; the failover run completed meanwhile
		if !completedRead {
			t.Fatal("v's tree cache never read the item's children")
		}
		coordtest.CompleteAll(t, runs[0])
		synctest.Wait() // the leader resharded

		run, err := v.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if sh := run.Shards(); len(sh) != 1 || sh[0].Failover || sh[0].Item != items[0] {
			t.Fatalf("v's run = %+v, want its own run of item %d", sh, items[0])
		}
		completed := store.Join(itemPath, "completed")
		if ok, _, err := v.St.Exists(ctx, completed); err != nil || ok {
			t.Fatalf("%s exists = %v (err %v) while v runs the item; want it deleted by v's Begin", completed, ok, err)
		}
		h.B.Kill(t, vst)
		h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's item queued for failover again", func(q testsignal.Queued) bool {
			return slices.Equal(q.Items, items)
		})
	})
}

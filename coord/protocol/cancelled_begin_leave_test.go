package protocol_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// A Begin whose ctx ends while its transaction is in flight (the Node's
// stop cancels a Begin under way) fails, though the transaction was
// applied: the run record says the items run, and the live marker exists.
// The server then leaves gracefully and its process exits (its session
// closed). Its leftover is settled before it goes offline: the marker
// deleted and the record completed, so the leader's failover scan does not
// take the leave for a crash. Before, only the marker was deleted: the
// record without completion and without its marker, on the current
// assignment, was a crashed run's, and its items were failed over
// (examples/pgbatch's TestRollingRestart under load: 4 failover runs after
// a graceful stop).
func TestCancelledBeginThenLeaveIsNoCrash(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	cfg := coordtest.Config("job", 4, func(c *jobconfig.Config) { c.Failover = true })
	leader := h.Start("a", cfg)
	var armed atomic.Bool
	hs := &coordtest.HookStore{Store: h.B.Connect(t)}
	hs.After = func(_ context.Context, c coordtest.Call, err error) error {
		if c.Method != "Multi" || err != nil || !armed.CompareAndSwap(true, false) {
			return err
		}
		return fmt.Errorf("applied, then the caller gave up: %w", context.Canceled)
	}
	b, err := h.TryStart("b", cfg, hs)
	if err != nil {
		t.Fatal(err)
	}
	coordtest.CompleteAll(t, coordtest.BeginAll(t, leader, b)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	armed.Store(true)
	if _, err := b.Job.Begin(ctx, time.Now()); err == nil {
		t.Fatal("b's Begin cancelled in flight succeeded")
	}
	if armed.Load() {
		t.Fatal("b's Begin sent no transaction")
	}
	b.Stop(t)
	if err := b.St.Close(); err != nil { // the process exits
		t.Fatal(err)
	}

	data, _, err := h.AdminStore.Get(ctx, "/"+h.NS+"/job/servers/b/run")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Begin, Complete string
		Queued          bool
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Complete == "" || rec.Queued {
		t.Fatalf("b's run record after its graceful leave: %s; want its completion written (not a crashed run's record)", data)
	}
	// The leader takes over every item by a reshard, none by failover.
	runs := coordtest.BeginAll(t, leader)
	coordtest.AssertPartition(t, 4, runs...)
	for _, sh := range runs[0].Shards() {
		if sh.Failover {
			t.Fatalf("item %d failed over after a graceful leave", sh.Item)
		}
	}
	coordtest.CompleteAll(t, runs...)
	queued, _, err := h.AdminStore.Children(ctx, "/"+h.NS+"/job/leader/failover/items")
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) > 0 {
		t.Fatalf("failover queue after a graceful leave: %v, want empty", queued)
	}
}

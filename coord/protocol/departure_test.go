package protocol_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// heldRearm is a HookStore's Before hook that blocks, once armed, a
// ChildrenW on one path until release is closed: the watcher step that
// re-arms that watch stops there, and everything it would have seen
// meanwhile stays unseen.
type heldRearm struct {
	path    string
	armed   atomic.Bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldRearm) before(ctx context.Context, c coordtest.Call) error {
	if c.Method == "ChildrenW" && c.Path == h.path && h.armed.Load() {
		h.once.Do(func() { close(h.entered) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// A server joins, is sharded, begins a run and dies, all before the
// leader's tree cache has seen it live: the cache goes from "server-0
// alone" to "server-0, and server-1 without a status node", which is no
// change of the live set. The leader must still see the departure:
// requeue the dead server's unfinished item for failover and reshard.
// (The Node failover tests failed about 1 run in 30 under load this way:
// the leader's Begin resharded from direct reads while its watcher lagged.)
func TestDepartureUnseenByLeaderCache(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	cfg := coordtest.Config("job", 2, func(c *jobconfig.Config) { c.Failover = true })
	held := &heldRearm{
		path:    "/" + h.NS + "/job/servers",
		entered: make(chan struct{}),
		release: make(chan struct{}),
	}
	leader, err := h.TryStart("server-0", cfg, &coordtest.HookStore{Store: h.B.Connect(t), Before: held.before})
	if err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	// server-1's join fires the leader's servers watch; the leader's
	// watcher blocks re-arming it, before reading the new server.
	crashing := h.Start("server-1", cfg)
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's watcher never re-armed its servers watch after a join")
	}
	runs := coordtest.BeginAll(t, leader, crashing)
	parts := coordtest.AssertPartition(t, 2, runs...)
	coordtest.CompleteAll(t, runs[0])
	h.B.Kill(t, crashing.St)
	close(held.release)

	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "the dead server's item queued for failover", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, parts[1])
	})
	coordtest.WaitSignal(t, leader.Job, protocol.SignalFailover)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := leader.Job.ClaimFailover(ctx); err != nil || !ok {
		t.Fatalf("ClaimFailover = %v, %v; want the dead server's item claimed", ok, err)
	}
	run, err := leader.Job.Begin(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sh := run.Shards()
	if len(sh) != 1 || !sh[0].Failover || !slices.Equal([]int{sh[0].Item}, parts[1]) {
		t.Fatalf("failover run shards = %+v, want the dead server's item %v", sh, parts[1])
	}
	coordtest.CompleteAll(t, run)
	// The departure raised the resharding flag too: the survivor now owns
	// both items.
	coordtest.AssertPartition(t, 2, coordtest.BeginAll(t, leader)...)
}

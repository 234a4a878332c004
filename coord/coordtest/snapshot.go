package coordtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// testConfigSnapshot: a config edit that lands while Begin runs (after it
// took its config, before it marked the items running) does not leak into
// the run: the run's Config (Shard.Total) and item parameters come from the
// one snapshot Begin computed its items with, and the next trigger gets the
// edit whole.
func testConfigSnapshot(t *testing.T, h *Harness) {
	oldParams, newParams := "0=a,1=b,2=c,3=d", "0=A,1=B,2=C,3=D,4=E,5=F"
	sharding := store.Join(h.NS, "job", "servers", "a", "sharding")
	// edit runs once, at the first transaction fenced by a's sharding
	// node: Begin's (it reads the node from its tree cache, or directly
	// after a reshard; the transaction is where it always goes).
	var (
		edit  func()
		armed atomic.Bool // edit is set
		once  sync.Once
	)
	hs := &HookStore{Store: h.B.Connect(t), Before: func(_ context.Context, c Call) error {
		if armed.Load() && c.Checks(sharding) {
			once.Do(edit)
		}
		return nil
	}}
	a, err := h.TryStart("a", Config("job", 4, func(c *jobconfig.Config) { c.ShardingItemParameters = oldParams }), hs)
	if err != nil {
		t.Fatal(err)
	}
	// The first Begin reshards if the join left the flag up; the edit goes
	// in before its transaction, and the job must have applied it before
	// Begin goes on.
	edit = func() {
		if err := h.Admin.SetConfig(testCtx(t), "job", "shardingTotalCount", "6"); err != nil {
			t.Errorf("set total: %v", err)
		}
		if err := h.Admin.SetConfig(testCtx(t), "job", "shardingItemParameters", newParams); err != nil {
			t.Errorf("set item parameters: %v", err)
		}
		Eventually(t, "the job to apply the edit", func() bool {
			c := a.Job.Config()
			return c.ShardingTotalCount == 6 && c.ShardingItemParameters == newParams
		})
		// The leader's watcher reshards on the new total at once (no item
		// runs yet): the transaction fails on the sharding node's version,
		// and the assignment Begin reads next lists items 4 and 5: Begin
		// must drop them by its snapshot's total.
		Eventually(t, "the prompt reshard on the new total", func() bool {
			d, _, err := hs.Store.Get(testCtx(t), sharding)
			return err == nil && string(d) == "0,1,2,3,4,5"
		})
	}
	armed.Store(true)
	run, err := a.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, "run begun before the edit applied", run, 4, map[int]string{0: "a", 1: "b", 2: "c", 3: "d"})
	// The run's distribute-once barrier counts the set on the same
	// snapshot: its four items complete it (on the edited total of six it
	// would wait for two items no run has).
	ran := false
	if err := run.Once(testCtx(t), "started", 10*time.Second, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Run.Once over the run's snapshot: ran %v, err %v", ran, err)
	}
	if err := run.Complete(testCtx(t), time.Time{}); err != nil {
		t.Fatal(err)
	}
	// The next trigger: the new total and parameters, whole (the leader
	// reshards on the new total first).
	run, err = a.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer CompleteAll(t, run)
	checkSnapshot(t, "run after the edit", run, 6, map[int]string{0: "A", 1: "B", 2: "C", 3: "D", 4: "E", 5: "F"})
}

// checkSnapshot asserts that run's config has total items, that its items
// are exactly 0..total-1, and that each has its parameter from params.
func checkSnapshot(t *testing.T, what string, run *protocol.Run, total int, params map[int]string) {
	t.Helper()
	if got := run.Config().ShardingTotalCount; got != total {
		t.Fatalf("%s: Config().ShardingTotalCount = %d, want %d", what, got, total)
	}
	shards := run.Shards()
	if len(shards) != total {
		t.Fatalf("%s: %d items %v, want all %d of the snapshot's total", what, len(shards), shards, total)
	}
	for _, s := range shards {
		if s.Item >= total {
			t.Fatalf("%s: item %d beyond the snapshot's total %d", what, s.Item, total)
		}
		if got := run.ItemParameter(s.Item); got != params[s.Item] {
			t.Fatalf("%s: item %d parameter %q, want %q (one snapshot)", what, s.Item, got, params[s.Item])
		}
	}
}

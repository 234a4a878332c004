package coord_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestScaleZooKeeper is the large-job measurement behind `make
// bench-scale`: SHARDFLOW_SCALE_ITEMS items (10,000 there) over 3 servers
// on real ZooKeeper. It reshards, runs every item (Begin and Complete split
// below the request limit), reads the status, loses a server mid-run
// (its session cut, as a crash), queues its items for failover, claims and
// runs one of them, and lets the survivors take the rest over by
// resharding. It logs the time of each step and the requests per server of
// a steady-state trigger; it asserts only outcomes (every item once).
// Skipped unless SHARDFLOW_SCALE_ITEMS is set.
func TestScaleZooKeeper(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SHARDFLOW_SCALE_ITEMS"))
	if n <= 0 {
		t.Skip("set SHARDFLOW_SCALE_ITEMS (make bench-scale) to run the scale measurement")
	}
	zk := integration.SharedZooKeeper(t)
	b := coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0]})
	h := coordtest.NewHarness(t, b)
	cfg := coordtest.Config("scale", n, func(c *jobconfig.Config) { c.Failover = true })
	const servers = 3
	cs := make([]*coord.CountingStore, servers)
	srv := make([]*coordtest.Server, servers)
	for i := range servers {
		cs[i] = coord.NewCountingStore(b.Connect(t))
		s, err := h.TryStart(fmt.Sprintf("s%d", i), cfg, cs[i])
		if err != nil {
			t.Fatal(err)
		}
		srv[i] = s
	}
	step := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		t.Logf("SCALE items=%d %s: %.3f s", n, what, time.Since(start).Seconds())
	}
	var runs []*coord.Run
	step("first trigger: reshard + Begin on 3 servers", func() { runs = beginAll(t, srv...) })
	coordtest.AssertPartition(t, n, runs...)
	step("first Complete on 3 servers", func() { completeAll(t, runs...) })

	before := make([]coord.Counts, servers)
	for i := range servers {
		before[i] = cs[i].Counts()
	}
	step("steady trigger: Begin on 3 servers", func() { runs = beginAll(t, srv...) })
	step("steady Complete on 3 servers", func() { completeAll(t, runs...) })
	for i := range servers {
		d := cs[i].Counts().Sub(before[i])
		t.Logf("SCALE items=%d server s%d steady trigger: %d write requests (%d ops), %d reads", n, i, d.Writes, d.MultiOps, d.Reads)
	}

	ctx := context.Background()
	var st coord.JobStatus
	step("status", func() {
		var err error
		if st, err = h.Admin.Status(ctx, "scale"); err != nil {
			t.Fatal(err)
		}
	})
	completed := 0
	for _, it := range st.Items {
		if it.Completed {
			completed++
		}
	}
	if len(st.Items) != n || completed != n {
		t.Fatalf("status: %d items, %d completed; want %d and %d", len(st.Items), completed, n, n)
	}

	// s2 crashes mid-run: its session is cut and expires.
	runs = beginAll(t, srv...)
	victim := len(runs[2].Shards())
	start := time.Now()
	b.Kill(t, srv[2].St)
	completeAll(t, runs[0], runs[1])
	testwait.For(t, 2*time.Minute, "the crashed server's items queued for failover", func() bool {
		st, err := h.Admin.Status(ctx, "scale")
		return err == nil && len(st.FailoverQueue) == victim
	})
	t.Logf("SCALE items=%d kill -> %d items queued for failover: %.3f s", n, victim, time.Since(start).Seconds())
	step("one failover claim and run on a survivor", func() {
		// The survivor's cache sees the queue a moment after the status did.
		testwait.ForNoError(t, time.Minute, "a failover claim on a survivor", func() error {
			ok, err := srv[0].Job.ClaimFailover(ctx)
			if err == nil && !ok {
				err = fmt.Errorf("nothing claimed")
			}
			return err
		})
		r := beginAll(t, srv[0])
		if len(r[0].Shards()) != 1 || !r[0].Shards()[0].Failover {
			t.Fatalf("failover run %v, want one failover item", r[0].Shards())
		}
		completeAll(t, r...)
	})
	step("survivors take over by resharding: Begin on 2 servers", func() { runs = beginAll(t, srv[0], srv[1]) })
	coordtest.AssertPartition(t, n, runs...)
	completeAll(t, runs...)
	step("status after the takeover", func() {
		if _, err := h.Admin.Status(ctx, "scale"); err != nil {
			t.Fatal(err)
		}
	})
}

// beginAll is coordtest.BeginAll with a context long enough for a first
// trigger of thousands of items (each item's nodes read once when the item
// becomes the server's).
func beginAll(t *testing.T, servers ...*coordtest.Server) []*coord.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	runs := make([]*coord.Run, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { runs[i], errs[i] = s.Job.Begin(ctx, time.Now()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Begin on %s: %v", servers[i].ID, err)
		}
	}
	return runs
}

// completeAll completes runs, with beginAll's patience.
func completeAll(t *testing.T, runs ...*coord.Run) {
	t.Helper()
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		err := r.Complete(ctx, time.Time{})
		cancel()
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

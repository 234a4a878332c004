package protocol_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/storecount"
)

// settle returns once every goroutine of the test's bubble (the servers'
// watchers, the memstore's sessions) is blocked: the watchers have re-armed
// after the last write and nothing is in flight. A state, not a pause.
func settle() { synctest.Wait() }

// TestCoordinationCost measures the requests one steady-state trigger
// (Begin + Complete on every server, no resharding) costs per server, for
// S servers and N items, and asserts that neither the writes nor the reads
// (watch re-arms included) grow with N; then the same with
// monitorExecution=false, whose steady-state trigger sends nothing
// (quiet.go). Run with -v to print the table recorded in docs/benchmarks.md;
// SHARDFLOW_COST_ITEMS (e.g. 512,4096,10000) changes the item counts.
func TestCoordinationCost(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	sizes := []int{8, 64, 512}
	if v := os.Getenv("SHARDFLOW_COST_ITEMS"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("SHARDFLOW_COST_ITEMS=%q: want item counts > 0, comma-separated (e.g. 512,4096,10000)", v)
			}
			sizes = append(sizes, n)
		}
	}
	for _, monitor := range []bool{true, false} {
		t.Logf("monitorExecution=%t:", monitor)
		t.Log("| servers S | items N | write requests/server/trigger | ops inside them/server | reads/server (incl. watch re-arms) | ElasticJob 1.x writes/server (~7N/S+2) | 3.x writes/server (~2N/S) | requests of one status read |")
		t.Log("| --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, s := range []int{1, 3} {
			for _, n := range sizes {
				synctest.Test(t, func(t *testing.T) { measureCost(t, s, n, monitor) })
			}
		}
	}
}

// measureCost runs the warm-up and the measured trigger for S servers and N
// items inside a synctest bubble, so settle can wait for quiescence.
func measureCost(t *testing.T, s, n int, monitor bool) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	cs := make([]*storecount.Store, s)
	servers := make([]*coordtest.Server, s)
	for i := range s {
		cs[i] = storecount.New(h.B.Connect(t))
		srv, err := h.TryStart(fmt.Sprintf("s%d", i), coordtest.Config("job", n, func(c *jobconfig.Config) { c.DisableMonitorExecution = !monitor }), cs[i])
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = srv
	}
	// Warm-up triggers: the leader reshards in the first; a server whose
	// cache saw the other servers join only after its first Begin reads
	// their run records once in the second (the layout guard checks each
	// new set of online servers).
	for range 2 {
		coordtest.CompleteAll(t, coordtest.BeginAll(t, servers...)...)
		settle()
	}
	before := make([]storecount.Counts, s)
	for i, c := range cs {
		before[i] = c.Counts()
	}
	coordtest.CompleteAll(t, coordtest.BeginAll(t, servers...)...)
	settle()
	var writes, ops, reads int64
	for i, c := range cs {
		d := c.Counts().Sub(before[i])
		writes += d.Writes
		ops += d.MultiOps
		reads += d.Reads
	}
	w := float64(writes) / float64(s)
	// One status read at rest: the run records give every item's state
	// and times; no item has a container (normal runs write none).
	as := storecount.New(h.B.Connect(t))
	js, err := coord.NewAdmin(as, h.NS).Status(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := coordtest.CheckItemTimes(t.Context(), h.AdminStore, h.NS, "job", js); err != nil {
		t.Fatal(err)
	}
	for _, it := range js.Items {
		// Completed (ElasticJob's completed node) is a monitored run's.
		if it.Completed != monitor || it.Running || it.LastBeginTime == nil || it.LastCompleteTime == nil {
			t.Fatalf("S=%d N=%d monitorExecution=%t: item %+v after the trigger, want both times (completed only if monitored)", s, n, monitor, it)
		}
	}
	status := as.Counts().Reads
	t.Logf("| %d | %d | %.1f | %.1f | %.1f | %d | %d | %d |", s, n, w, float64(ops)/float64(s),
		float64(reads)/float64(s), 7*n/s+2, 2*n/s, status)
	// Before the run records it was about 3 per item (a listing, then
	// lastBeginTime and lastCompleteTime), then 1 per item; now a fixed
	// few (config, leader, flag, servers and their nodes, records and
	// markers, queue, audit), none per item.
	if limit := 40 + 14*int64(s); status > limit {
		t.Errorf("S=%d N=%d: a status read made %d requests, want at most %d (a fixed few, none per item)", s, n, status, limit)
	}
	// Per server per trigger, at any N: Begin reads the flag directory,
	// its sharding node and the failover directory from the tree cache
	// (no request; 3 direct reads before), and writes one Multi; Complete
	// writes one (docs/benchmarks.md, "Coordination cost per trigger").
	if r := float64(reads) / float64(s); r != 0 {
		t.Errorf("S=%d N=%d: %.1f reads per server per trigger, want 0 (Begin's flag, sharding node and failover directory from the tree cache)", s, n, r)
	}
	if !monitor {
		// Unmonitored: the plan of the last Begin that wrote, nothing
		// changed: neither Begin nor Complete sends anything.
		if w != 0 || ops != 0 {
			t.Errorf("S=%d N=%d monitorExecution=false: %.1f writes (%d operations) per server per trigger, want 0", s, n, w, ops)
		}
	} else if w != 2 {
		t.Errorf("S=%d N=%d: %.1f writes per server per trigger, want 2 (one Multi in Begin, one in Complete)", s, n, w)
	}
	if o := float64(ops) / float64(s); monitor && o > 9 {
		t.Errorf("S=%d N=%d: %.1f operations inside them per server, want at most 9 (Begin: 3 checks, status, record, marker; Complete: status, record, marker; none per item)", s, n, o)
	}
	for _, srv := range servers {
		srv.Stop(t)
	}
}

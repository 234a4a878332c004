package coord_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
)

// settle returns once every goroutine of the test's bubble (the servers'
// watchers, the memstore's sessions) is blocked: the watchers have re-armed
// after the last write and nothing is in flight. A state, not a pause.
func settle() { synctest.Wait() }

// TestCoordinationCost measures the requests one steady-state trigger
// (Begin + Complete on every server, no resharding) costs per server, for
// S servers and N items, and asserts that neither the writes nor the reads
// (watch re-arms included) grow with N.
// Run with -v to print the table recorded in docs/benchmarks.md.
func TestCoordinationCost(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	t.Log("| servers S | items N | write requests/server/trigger | ops inside them/server | reads/server (incl. watch re-arms) | ElasticJob 1.x writes/server (~7N/S+2) | 3.x writes/server (~2N/S) |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- |")
	for _, s := range []int{1, 3} {
		for _, n := range []int{8, 64, 512} {
			synctest.Test(t, func(t *testing.T) { measureCost(t, s, n) })
		}
	}
}

// measureCost runs the warm-up and the measured trigger for S servers and N
// items inside a synctest bubble, so settle can wait for quiescence.
func measureCost(t *testing.T, s, n int) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	cs := make([]*coord.CountingStore, s)
	servers := make([]*coordtest.Server, s)
	for i := range s {
		cs[i] = coord.NewCountingStore(h.B.Connect(t))
		srv, err := h.TryStart(fmt.Sprintf("s%d", i), coordtest.Config("job", n), cs[i])
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = srv
	}
	// Warm-up trigger: the leader reshards.
	coordtest.CompleteAll(t, coordtest.BeginAll(t, servers...)...)
	settle()
	before := make([]coord.Counts, s)
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
	t.Logf("| %d | %d | %.1f | %.1f | %.1f | %d | %d |", s, n, w, float64(ops)/float64(s),
		float64(reads)/float64(s), 7*n/s+2, 2*n/s)
	if r := float64(reads) / float64(s); r != 2 {
		t.Errorf("S=%d N=%d: %.1f reads per server per trigger, want 2 (the flag and the sharding node)", s, n, r)
	}
	if w != 2 {
		t.Errorf("S=%d N=%d: %.1f writes per server per trigger, want 2 (one Multi in Begin, one in Complete)", s, n, w)
	}
	for _, srv := range servers {
		srv.Stop(t)
	}
}

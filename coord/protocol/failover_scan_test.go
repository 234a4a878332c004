package protocol_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// The leader's crash scan fails over only the offline owner's own runs:
// an item whose last begin is older than that owner's assignment was begun
// by a previous owner. Since layout 2 the previous owner's run holds the
// reshard (its live marker survives the edits), and the new owner's record
// names no item it did not run. Memstore simulation seed 6311095: a's run of an item
// lost its running node to monitorExecution=false (switched on again at
// once), a join resharded the item away while the run went on, and the new
// owner left without running it; the scan saw the item begun, neither
// completed nor running, and queued it: a claimer ran it beside a's run,
// and nothing had crashed. Both a graceful leave and a crash of the new
// owner, in synctest bubbles.
func TestFailoverScanIgnoresPreviousOwnersRun(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "new owner leaves"
		if crash {
			name = "new owner crashes"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { failoverScanIgnoresPreviousOwnersRun(t, crash) })
		})
	}
}

func failoverScanIgnoresPreviousOwnersRun(t *testing.T, crash bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	h := coordtest.NewHarness(t, coordtest.Mem())
	cfg := coordtest.Config("job", 2, func(c *jobconfig.Config) { c.Failover = true })
	l := h.Start("l", cfg)
	a := h.Start("a", cfg)
	runs := coordtest.BeginAll(t, l, a)
	parts := coordtest.AssertPartition(t, 2, runs...)
	if len(parts[1]) != 1 || parts[1][0] != 0 {
		t.Fatalf("a's items = %v; want [0] (servers a, l sorted)", parts[1])
	}
	coordtest.CompleteAll(t, runs[0])
	// a's run of item 0 goes on through an off-and-on edit of
	// monitorExecution: since layout 2 the edit deletes nothing, so the
	// run's live marker stays and holds the reshard (before, the edit
	// stripped the run's running node and a join resharded the item away
	// while it ran).
	for _, v := range []string{"false", "true"} {
		if err := h.Admin.SetConfig(ctx, "job", jobconfig.FieldMonitorExecution, v); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait()
	// Server "0" sorts first: the reshard its join causes gives it item 0,
	// but only once a's run is over.
	n := h.Start("0", cfg)
	synctest.Wait()
	sharding := "/" + h.NS + "/job/servers/0/sharding"
	if data, _, err := h.AdminStore.Get(ctx, sharding); err == nil && string(data) == "0" {
		t.Fatalf("%s = %q while a's run of item 0 goes on; want the reshard held by a's live marker", sharding, data)
	}
	if err := runs[1].Complete(ctx, time.Time{}); err != nil {
		t.Fatalf("a's Complete after the edits: %v", err)
	}
	synctest.Wait()
	if data, _, err := h.AdminStore.Get(ctx, sharding); err != nil || string(data) != "0" {
		t.Fatalf("%s = %q, %v; want \"0\" (item 0 moved to the new server once a's run completed)", sharding, data, err)
	}
	if crash {
		h.B.Kill(t, n.St)
	} else {
		n.Stop(t)
	}
	// Past the offline grace: the leader scans for orphans, then reshards.
	time.Sleep(5 * time.Minute)
	synctest.Wait()
	if data, _, err := h.AdminStore.Get(ctx, sharding); err != nil || string(data) != "" {
		t.Fatalf("%s after it left = %q, %v; want \"\" (the leader resharded after its scan)", sharding, data, err)
	}
	queue := "/" + h.NS + "/job/leader/failover/items"
	if q, _, err := h.AdminStore.Children(ctx, queue); err != nil || len(q) != 0 {
		t.Errorf("failover queue = %v, %v; want empty: the new owner never ran item 0, and a's run completed", q, err)
	}
}

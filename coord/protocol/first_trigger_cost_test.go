package protocol_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/storecount"
)

// TestFirstTriggerCost bounds what the FIRST trigger after a start costs a
// server, on top of a steady-state one (issue 31: 10,000 jobs on one cron
// and 3 servers took p99 62-66 s to reach BeforeRun at their first fire,
// every job's first Begin and Complete queued on 3 ZooKeeper sessions).
// Three servers join a job of 3 items one after the other and settle (the
// leader's reshard is done, as `make bench-fires` waits for it), then each
// begins and completes its first run with its counts, as a Node's run
// does, counted to rest. Before: every server's first Begin read the other
// servers' run records (the layout guard, one after the other) and its
// item's container (the failover view) before its Multi, and its first
// Complete read its count totals (two reads, one after the other) before
// its Multi, which created its count nodes, so every server's tree cache
// listed that server's node again: 8 reads per server (3 in Begin, 5
// after it). After: 1 (the view). A server's count nodes are created at 0
// with its node (registration), the join knows the totals (0 for a server
// new to the job; read beside its other reads after a clean stop), and the
// watcher reads the guard's records when it sees new servers, off the
// run's path.
func TestFirstTriggerCost(t *testing.T) {
	for _, monitor := range []bool{true, false} {
		t.Run(fmt.Sprintf("monitorExecution=%t", monitor), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := coordtest.NewHarness(t, coordtest.Mem())
				const s = 3
				cs := make([]*storecount.Store, s)
				servers := make([]*coordtest.Server, s)
				for i := range s {
					cs[i] = storecount.New(h.B.Connect(t))
					srv, err := h.TryStart(fmt.Sprintf("s%d", i), coordtest.Config("job", s, func(c *jobconfig.Config) { c.DisableMonitorExecution = !monitor }), cs[i])
					if err != nil {
						t.Fatal(err)
					}
					servers[i] = srv
					settle()
				}
				counts := func() []storecount.Counts {
					out := make([]storecount.Counts, s)
					for i, c := range cs {
						out[i] = c.Counts()
					}
					return out
				}
				// Counted to rest: the tree caches' reactions to what the
				// run wrote are the trigger's cost too.
				at0 := counts()
				runs := coordtest.BeginAll(t, servers...)
				settle()
				at1 := counts()
				for _, r := range runs {
					if len(r.Shards()) != 1 {
						t.Fatalf("first run's items %v, want one item per server", r.Shards())
					}
					if err := r.CompleteWith(t.Context(), time.Time{}, protocol.RunOutcome{Counts: &protocol.CountReport{Success: 1}}); err != nil {
						t.Fatal(err)
					}
				}
				settle()
				at2 := counts()
				for i := range s {
					b, c := at1[i].Sub(at0[i]), at2[i].Sub(at1[i])
					t.Logf("%s, first trigger: Begin %d reads %d writes, Complete %d reads %d writes", servers[i].ID, b.Reads, b.Writes, c.Reads, c.Writes)
					// The one read left: Begin's view of its items' claims
					// and failover marks, read once per assignment.
					if b.Reads > 1 || c.Reads != 0 {
						t.Errorf("%s: the first trigger read %d times in Begin and %d in Complete, want at most 1 (its item's failover view) and 0 (the guard's records read ahead, the totals known at the join, the count nodes created with the server's)", servers[i].ID, b.Reads, c.Reads)
					}
					if b.Writes != 1 || c.Writes != 1 {
						t.Errorf("%s: the first trigger wrote %d times in Begin and %d in Complete, want 1 and 1 (its Multis)", servers[i].ID, b.Writes, c.Writes)
					}
				}
				for _, srv := range servers {
					srv.Stop(t)
				}
			})
		})
	}
}

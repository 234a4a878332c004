package coordtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/internal/storecount"
	"github.com/shardflow/shardflow/internal/testsignal"
	"github.com/shardflow/shardflow/internal/testwait"
)

// testMonitorExecutionOffQuiet: with monitorExecution off, a trigger that
// finds nothing changed since the last one (no reshard, no failover
// writer, no new failing item) writes nothing on any server: its Begin
// plans on the tree cache and its plan is the one the last written Begin
// fenced, its Complete finds the record as it would write it
// (coord/protocol/quiet.go). What changes writes again: a reshard (the
// record names the new items and epoch), a failing item (status shows it),
// its recovery. The runs keep their fencing: CheckOwnership accepts the
// owner's commit of a quiet run.
func testMonitorExecutionOffQuiet(t *testing.T, h *Harness) {
	off := func(c *jobconfig.Config) { c.DisableMonitorExecution = true }
	var servers []*Server
	var counts []*storecount.Store
	for _, id := range []string{"a", "b"} {
		c := storecount.New(h.B.Connect(t))
		s, err := h.TryStart(id, Config("job", 4, off), c)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		servers, counts = append(servers, s), append(counts, c)
	}
	h.Signals.Resharded.Wait(t, signalWait, "a reshard over a and b", func(e testsignal.Resharded) bool { return len(e.Servers) == 2 })

	// trigger runs one trigger on every server and returns its write
	// requests (Multis included) and its runs, completed with outcome.
	trigger := func(out protocol.RunOutcome) (int64, []*protocol.Run) {
		t.Helper()
		before := make([]storecount.Counts, len(counts))
		for i, c := range counts {
			before[i] = c.Counts()
		}
		runs := BeginAll(t, servers...)
		AssertPartition(t, 4, runs...)
		for _, r := range runs {
			if err := r.CompleteWith(testCtx(t), time.Time{}, out); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}
		var writes int64
		for i, c := range counts {
			writes += c.Counts().Sub(before[i]).Writes
		}
		return writes, runs
	}
	// quiet waits for a trigger that writes nothing (the first triggers
	// after a change write: the Begin whose plan the next ones repeat, a
	// Begin on a tree cache that had not seen the change yet), then checks
	// that the next ones write nothing either.
	quiet := func(what string) {
		t.Helper()
		testwait.ForNoError(t, signalWait, what, func() error {
			if w, _ := trigger(protocol.RunOutcome{}); w != 0 {
				return fmt.Errorf("a trigger wrote %d requests", w)
			}
			return nil
		})
		for range 3 {
			counts := &protocol.CountReport{Success: 1}
			w, runs := trigger(protocol.RunOutcome{Counts: counts})
			if w != 0 {
				t.Fatalf("%s: a steady-state trigger wrote %d requests, want 0", what, w)
			}
			if counts.Written {
				t.Fatalf("%s: a quiet Complete reported its counts written", what)
			}
			// Fencing holds: the owner's commit of a quiet run's item is accepted.
			for _, r := range runs {
				for _, a := range r.Shards() {
					if err := r.CheckOwnership(testCtx(t), a.Item); err != nil {
						t.Fatalf("%s: CheckOwnership(%d) of a quiet run: %v", what, a.Item, err)
					}
				}
			}
		}
	}
	quiet("an unmonitored steady state on a and b")
	checkQuietStatus(t, h, 4)

	// The interval report writes the times of the last run that wrote
	// nothing: status shows them (a Begin at a time of the test's choice,
	// an hour ahead, so that no earlier run can have it).
	at := time.UnixMilli(h.Now().Add(time.Hour).UnixMilli())
	r, err := servers[0].Job.Begin(testCtx(t), at)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(testCtx(t), time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Shards() {
		if it := status(t, h, "job").Items[a.Item]; it.LastBeginTime != nil && it.LastBeginTime.Equal(at) {
			t.Fatalf("item %d: the run at %v wrote its record; want a quiet run", a.Item, at)
		}
	}
	if err := servers[0].Job.ReportCounts(testCtx(t), 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Shards() {
		if it := status(t, h, "job").Items[a.Item]; it.LastBeginTime == nil || !it.LastBeginTime.Equal(at) || it.LastCompleteTime == nil {
			t.Fatalf("item %d after the interval report: %+v, want lastBeginTime %v (the last quiet run's) and a completion", a.Item, it, at)
		}
	}
	checkQuietStatus(t, h, 4)

	// A failing item writes its record (status shows it), and so does
	// its recovery; then the trigger is quiet again.
	w, _ := trigger(protocol.RunOutcome{Errors: map[int]string{0: "boom"}})
	if w == 0 {
		t.Fatal("a trigger whose item 0 failed wrote nothing: status cannot show the failure")
	}
	if it := status(t, h, "job").Items[0]; it.ConsecutiveFailures != 1 || it.LastError != "boom" {
		t.Fatalf("item 0 after a failed quiet run: %+v, want 1 failure, boom", it)
	}
	quiet("after item 0 recovered")
	if it := status(t, h, "job").Items[0]; it.ConsecutiveFailures != 0 {
		t.Fatalf("item 0 after its recovery: %+v, want no failure", it)
	}

	// A reshard (b leaves): a's next Begin writes its record with the new
	// items and epoch, and status names them.
	servers[1].Stop(t)
	servers, counts = servers[:1], counts[:1]
	h.Signals.Resharded.Wait(t, signalWait, "a reshard over a alone", func(e testsignal.Resharded) bool { return slices.Equal(e.Servers, []string{"a"}) })
	if w, runs := trigger(protocol.RunOutcome{}); w == 0 || len(runs[0].Shards()) != 4 {
		t.Fatalf("first trigger after the reshard: %d writes, items %v; want the record written for all 4 items", w, runs[0].Shards())
	}
	quiet("an unmonitored steady state on a alone")
	checkQuietStatus(t, h, 4)
}

// checkQuietStatus checks what status shows of an unmonitored job at rest:
// every item with both times (those of the last run that wrote its
// record; Completed, ElasticJob's completed node, is a monitored run's
// only), none running, every online server READY.
func checkQuietStatus(t *testing.T, h *Harness, total int) {
	t.Helper()
	st := h.Status(t, "job")
	if len(st.Items) != total {
		t.Fatalf("status shows %d items, want %d", len(st.Items), total)
	}
	for _, it := range st.Items {
		if it.Running || it.LastBeginTime == nil || it.LastCompleteTime == nil {
			t.Fatalf("item %+v of an unmonitored job at rest, want both times, not running", it)
		}
	}
	for _, s := range st.Servers {
		if s.Status != "READY" && s.Status != "OFFLINE" {
			t.Fatalf("server %s status %s, want READY (an unmonitored run never shows RUNNING)", s.ID, s.Status)
		}
	}
}

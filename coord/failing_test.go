package coord_test

import (
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
)

// testAdminFailingItems: a run's failed items are counted in status with
// their consecutive failed runs, since when and the whole last error, the
// job's health is failing while one fails (also during the next run, and
// across the server's restart), and a run without error clears the item.
func testAdminFailingItems(t *testing.T, h *coordtest.Harness) {
	ctx := ctxT(t)
	a := h.Start("a", coordtest.Config("j", 3))
	if st := h.Status(t, "j"); st.Health != coord.HealthOK || len(st.HealthReasons) != 0 {
		t.Fatalf("health before any run %q %v, want ok", st.Health, st.HealthReasons)
	}
	// The cause at the end of a long error must survive.
	long := `fetch: sources/postgres: reading "invoices" ` + strings.Repeat("x", 6000) + `: cannot scan NULL into *string`
	fail := func(errText string) {
		t.Helper()
		r := coordtest.BeginAll(t, a)[0]
		if err := r.CompleteWith(ctx, time.Time{}, protocol.RunOutcome{Errors: map[int]string{1: errText}}); err != nil {
			t.Fatal(err)
		}
	}
	fail("first error")
	first := h.Status(t, "j")
	it := first.Items[1]
	if it.ConsecutiveFailures != 1 || it.FailingSince == nil || it.LastError != "first error" || it.FailingOn != "a" {
		t.Fatalf("item 1 after a failed run %+v, want 1 failure since a time, its error, on a", it)
	}
	if first.Health != coord.HealthFailing || len(first.HealthReasons) != 1 || !strings.Contains(first.HealthReasons[0], "item 1 failing for 1 runs") {
		t.Fatalf("health %q %v, want failing naming item 1", first.Health, first.HealthReasons)
	}
	for _, other := range []int{0, 2} {
		if it := first.Items[other]; it.ConsecutiveFailures != 0 || it.LastError != "" || it.FailingSince != nil {
			t.Fatalf("item %d %+v, want not failing", other, it)
		}
	}
	fail(long)
	// During the next run (its Begin rewrote the record) the item still fails.
	r := coordtest.BeginAll(t, a)[0]
	st := h.Status(t, "j")
	it = st.Items[1]
	if it.ConsecutiveFailures != 2 || !it.FailingSince.Equal(*first.Items[1].FailingSince) || st.Health != coord.HealthFailing {
		t.Fatalf("item 1 during a run after two failed ones %+v (health %s), want 2 failures since the first", it, st.Health)
	}
	if len(it.LastError) > 4096 || !strings.HasPrefix(it.LastError, `fetch: sources/postgres: reading "invoices" `) ||
		!strings.HasSuffix(it.LastError, `: cannot scan NULL into *string`) {
		t.Fatalf("last error (%d bytes) %q..., want at most 4096 bytes keeping its head and its cause", len(it.LastError), it.LastError[:80])
	}
	if err := r.CompleteWith(ctx, time.Time{}, protocol.RunOutcome{Errors: map[int]string{1: "third"}}); err != nil {
		t.Fatal(err)
	}
	// A restart keeps the count (the server's record seeds it).
	a.Stop(t)
	a = h.Start("a", coordtest.Config("j", 3))
	fail("fourth")
	if it := h.Status(t, "j").Items[1]; it.ConsecutiveFailures != 4 || it.LastError != "fourth" {
		t.Fatalf("item 1 after a restart and a fourth failed run %+v, want 4", it)
	}
	coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
	st = h.Status(t, "j")
	if it := st.Items[1]; it.ConsecutiveFailures != 0 || it.LastError != "" || it.FailingSince != nil || !it.Completed {
		t.Fatalf("item 1 after a run without error %+v, want completed and not failing", it)
	}
	if st.Health != coord.HealthOK {
		t.Fatalf("health after the item recovered %q %v, want ok", st.Health, st.HealthReasons)
	}
}

// testAdminCountsWithComplete: the counts a run's Complete carries are
// written with the completion (no write of their own), with their time.
func testAdminCountsWithComplete(t *testing.T, h *coordtest.Harness) {
	ctx := ctxT(t)
	a := h.Start("a", coordtest.Config("j", 2))
	if err := a.Job.ReportCounts(ctx, 5, 1); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	r := coordtest.BeginAll(t, a)[0]
	c := &protocol.CountReport{Success: 7, Failure: 2}
	if err := r.CompleteWith(ctx, time.Time{}, protocol.RunOutcome{Counts: c}); err != nil {
		t.Fatal(err)
	}
	if !c.Written {
		t.Fatal("CompleteWith succeeded without setting Counts.Written")
	}
	ss := h.Status(t, "j").Servers[0]
	if ss.ProcessSuccessCount != 7 || ss.ProcessFailureCount != 2 || ss.TotalSuccessCount != 12 || ss.TotalFailureCount != 3 {
		t.Fatalf("counts %d/%d totals %d/%d, want 7/2 and 12/3", ss.ProcessSuccessCount, ss.ProcessFailureCount, ss.TotalSuccessCount, ss.TotalFailureCount)
	}
	if ss.CountsAsOf == nil || ss.CountsAsOf.Before(before.Add(-time.Second)) {
		t.Fatalf("counts as of %v, want the Complete's time (after %v)", ss.CountsAsOf, before)
	}
}

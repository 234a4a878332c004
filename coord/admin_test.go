package coord_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/storecount"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// adminTests run on memstore and on real ZooKeeper.
var adminTests = []struct {
	name string
	fn   func(*testing.T, *coordtest.Harness)
}{
	{"RefusesBadInput", testAdminRefusesBadInput},
	{"ShrinkTotal", testAdminShrinkTotal},
	{"ShrinkTotalWhileRunning", testAdminShrinkTotalWhileRunning},
	{"StatusFields", testAdminStatusFields},
	{"StatusTimesFromRunRecords", testAdminStatusTimesFromRunRecords},
	{"CumulativeCounts", testAdminCumulativeCounts},
	{"Audit", testAdminAudit},
	{"FailingItems", testAdminFailingItems},
	{"CountsWithComplete", testAdminCountsWithComplete},
	{"TriggerServer", testAdminTriggerServer},
}

func TestAdmin(t *testing.T) {
	for _, tc := range adminTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, coordtest.NewHarness(t, coordtest.Mem())) })
	}
}

func TestAdminZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	b := coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0]})
	for _, tc := range adminTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, coordtest.NewHarness(t, b)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// executionItems lists the execution/{item} nodes in the store, read
// through st.
func executionItems(t *testing.T, st store.Store, h *coordtest.Harness, job string) []string {
	t.Helper()
	names, _, err := st.Children(ctxT(t), store.Join(h.NS, job, "execution"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// testAdminRefusesBadInput reproduces issue 11's reports: --item -1 stopped
// the whole job, --item 99 on a 12-item job was kept for good, and
// fetchDataCount 0 was stored. Each is refused, names the problem, and
// changes nothing.
func testAdminRefusesBadInput(t *testing.T, h *coordtest.Harness) {
	a := coordtest.Config("j", 12)
	h.Start("a", a)
	before := h.Status(t, "j")
	ctx := ctxT(t)
	for _, item := range []int{-1, 12, 99} {
		err := h.Admin.DisableItem(ctx, "j", item)
		if !errors.Is(err, coord.ErrNoItem) || !strings.Contains(err.Error(), "0..11") {
			t.Errorf("DisableItem(%d) = %v, want ErrNoItem naming 0..11", item, err)
		}
		if err := h.Admin.EnableItem(ctx, "j", item); !errors.Is(err, coord.ErrNoItem) {
			t.Errorf("EnableItem(%d) = %v, want ErrNoItem", item, err)
		}
	}
	if err := h.Admin.Pause(ctx, "j", "nope"); !errors.Is(err, coord.ErrNoServer) {
		t.Errorf("Pause(server nope) = %v, want ErrNoServer", err)
	}
	if err := h.Admin.Trigger(ctx, "nojob"); !errors.Is(err, coord.ErrNoJob) {
		t.Errorf("Trigger(nojob) = %v, want ErrNoJob", err)
	}
	for _, tc := range []struct{ field, value string }{
		{jobconfig.FieldFetchDataCount, "0"},
		{jobconfig.FieldFetchDataCount, "-3"},
		{jobconfig.FieldConcurrentDataProcessThreadCount, "0"},
		{jobconfig.FieldShardingTotalCount, "0"},
		{jobconfig.FieldShardingTotalCount, "x"},
		{jobconfig.FieldCron, "not a cron"},
		{jobconfig.FieldShardingItemParameters, "12=too-far"},
		{"noSuchField", "1"},
	} {
		err := h.Admin.SetConfig(ctx, "j", tc.field, tc.value)
		var fe *jobconfig.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Fix == "" {
			t.Errorf("SetConfig(%s, %q) = %v, want a *jobconfig.FieldError naming %s with a fix", tc.field, tc.value, err, tc.field)
		}
	}
	after := h.Status(t, "j")
	if !maps2Equal(before.Config, after.Config) {
		t.Errorf("config changed by refused edits:\nbefore %v\nafter  %v", before.Config, after.Config)
	}
	if got := coordtest.ItemNumbers(after); !slices.Equal(got, coordtest.ItemNumbers(before)) || len(got) != 12 {
		t.Errorf("items after refused actions = %v, want 0..11", got)
	}
	for _, it := range after.Items {
		if it.Disabled {
			t.Errorf("item %d disabled by a refused action", it.Item)
		}
	}
	if len(after.Actions) != 0 {
		t.Errorf("refused actions recorded in the audit log: %+v", after.Actions)
	}
	// The boundary items are accepted.
	for _, item := range []int{0, 11} {
		if err := h.Admin.DisableItem(ctx, "j", item); err != nil {
			t.Errorf("DisableItem(%d): %v", item, err)
		}
	}
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// testAdminShrinkTotal: 12 -> 8 -> 5 leaves exactly the items below the
// total in the execution tree and in status, and the next runs cover them.
func testAdminShrinkTotal(t *testing.T, h *coordtest.Harness) {
	reader := h.B.Connect(t)
	a := h.Start("a", coordtest.Config("j", 12))
	coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
	ctx := ctxT(t)
	// Normal runs write no per-item node (layout 2): an item has a
	// container only once something rare was written for it (here a
	// disable, then an enable).
	if got := executionItems(t, reader, h, "j"); len(got) != 0 {
		t.Fatalf("execution items after a 12-item run: %v, want none (runs write per server, not per item)", got)
	}
	giveContainers(t, h, "j", 12)
	if err := h.Admin.DisableItem(ctx, "j", 11); err != nil {
		t.Fatal(err)
	}
	if got := executionItems(t, reader, h, "j"); len(got) != 12 {
		t.Fatalf("execution items after each item was disabled and enabled: %v", got)
	}
	for _, total := range []int{8, 5} {
		if err := h.Admin.SetConfig(ctx, "j", jobconfig.FieldShardingTotalCount, itoa(total)); err != nil {
			t.Fatal(err)
		}
		want := []string{}
		wantItems := []int{}
		for i := range total {
			wantItems = append(wantItems, i)
			want = append(want, itoa(i))
		}
		slices.Sort(want)
		if got := executionItems(t, reader, h, "j"); !slices.Equal(got, want) {
			t.Errorf("total %d: execution items %v, want %v", total, got, want)
		}
		if got := coordtest.ItemNumbers(h.Status(t, "j")); !slices.Equal(got, wantItems) {
			t.Errorf("total %d: status items %v, want %v", total, got, wantItems)
		}
		if err := h.Admin.DisableItem(ctx, "j", total); !errors.Is(err, coord.ErrNoItem) {
			t.Errorf("total %d: DisableItem(%d) = %v, want ErrNoItem", total, total, err)
		}
	}
	awaitConfig(t, a, func(c jobconfig.Config) bool { return c.ShardingTotalCount == 5 })
	runs := coordtest.BeginAll(t, a)
	coordtest.AssertPartition(t, 5, runs...)
	coordtest.CompleteAll(t, runs...)
}

// awaitConfig waits for s's job to signal a config change that satisfies ok.
func awaitConfig(t *testing.T, s *coordtest.Server, ok func(jobconfig.Config) bool) {
	t.Helper()
	ctx := ctxT(t)
	for !ok(s.Job.Config()) {
		select {
		case <-s.Job.Signals():
		case <-ctx.Done():
			t.Fatalf("config never applied on %s: %+v", s.ID, s.Job.Config())
		}
	}
}

// testAdminShrinkTotalWhileRunning: items beyond a lowered total that are
// running stay (and show as running) until their run completes; the
// leader's next reshard removes them.
func testAdminShrinkTotalWhileRunning(t *testing.T, h *coordtest.Harness) {
	reader := h.B.Connect(t)
	// The containers are given before "a" joins: a running server learns
	// of an enable through its cache's watch, so a Begin right after
	// EnableItem may still skip the item (36 of 300 runs did, CI on
	// eb39fe5 among them). "setup" only registers the job.
	setup := h.Start("setup", coordtest.Config("j", 12))
	giveContainers(t, h, "j", 12)
	setup.Stop(t)
	a := h.Start("a", coordtest.Config("j", 12))
	runs := coordtest.BeginAll(t, a)
	ctx := ctxT(t)
	if err := h.Admin.SetConfig(ctx, "j", jobconfig.FieldShardingTotalCount, "8"); err != nil {
		t.Fatal(err)
	}
	st := h.Status(t, "j")
	if got := coordtest.ItemNumbers(st); len(got) != 12 {
		t.Fatalf("items while 0..11 run under a lowered total 8: %v, want the running 8..11 still shown", got)
	}
	for _, it := range st.Items[8:] {
		if !it.Running {
			t.Fatalf("item %d beyond the total shown but not running: %+v", it.Item, it)
		}
	}
	coordtest.CompleteAll(t, runs...)
	awaitConfig(t, a, func(c jobconfig.Config) bool { return c.ShardingTotalCount == 8 })
	runs = coordtest.BeginAll(t, a) // the leader reshards and prunes
	coordtest.AssertPartition(t, 8, runs...)
	coordtest.CompleteAll(t, runs...)
	// The reshard may be the leader watcher's (prompt, asynchronous), so
	// wait for its signal (sent after the prune) rather than assume it is
	// done.
	h.Signals.Resharded.Wait(t, 20*time.Second, "the reshard over the lowered total", func(r testsignal.Resharded) bool {
		return r.Job == "j" && r.Total == 8
	})
	want := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	if got := executionItems(t, reader, h, "j"); !slices.Equal(got, want) {
		t.Fatalf("execution items after the reshard over total 8: %v, want %v (8..11 pruned)", got, want)
	}
	if got := coordtest.ItemNumbers(h.Status(t, "j")); len(got) != 8 {
		t.Fatalf("status items after the reshard: %v, want 0..7", got)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// giveContainers gives items 0..n-1 an execution container (each disabled,
// then enabled again): runs write none, and the tests of the pruning
// beyond a lowered total need some to prune.
func giveContainers(t *testing.T, h *coordtest.Harness, job string, n int) {
	t.Helper()
	for it := range n {
		if err := h.Admin.DisableItem(ctxT(t), job, it); err != nil {
			t.Fatal(err)
		}
		if err := h.Admin.EnableItem(ctxT(t), job, it); err != nil {
			t.Fatal(err)
		}
	}
}

// testAdminStatusFields: every documented JSON field is present even when
// empty, and the next fire time follows the stored cron.
func testAdminStatusFields(t *testing.T, h *coordtest.Harness) {
	h.Start("a", coordtest.Config("j", 2))
	st := h.Status(t, "j")
	if st.NextFireTime != nil {
		t.Errorf("nextFireTime without a cron = %v, want null", st.NextFireTime)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Job     map[string]json.RawMessage
		Server  map[string]json.RawMessage
		Item    map[string]json.RawMessage
		Servers []map[string]json.RawMessage `json:"servers"`
		Items   []map[string]json.RawMessage `json:"items"`
	}
	_ = json.Unmarshal(raw, &doc.Job)
	_ = json.Unmarshal(raw, &doc)
	for _, k := range []string{"job", "config", "configError", "leader", "servers", "items", "reshardingPending", "failoverQueue", "nextFireTime", "actions"} {
		if _, ok := doc.Job[k]; !ok {
			t.Errorf("job status JSON lacks %q: %s", k, raw)
		}
	}
	for _, k := range []string{"id", "hostName", "status", "sharding", "processSuccessCount", "processFailureCount", "totalSuccessCount", "totalFailureCount", "disabled", "paused", "shutdown", "lastError"} {
		if _, ok := doc.Servers[0][k]; !ok {
			t.Errorf("server status JSON lacks %q: %s", k, raw)
		}
	}
	for _, k := range []string{"item", "running", "completed", "failover", "misfire", "disabled", "lastBeginTime", "lastCompleteTime", "nextFireTime"} {
		if _, ok := doc.Items[0][k]; !ok {
			t.Errorf("item status JSON lacks %q: %s", k, raw)
		}
	}
	ctx := ctxT(t)
	if err := h.Admin.SetConfig(ctx, "j", jobconfig.FieldCron, "0/5 * * * * ?"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	st = h.Status(t, "j")
	if st.NextFireTime == nil || !st.NextFireTime.After(before) || st.NextFireTime.Second()%5 != 0 {
		t.Fatalf("nextFireTime with cron 0/5 = %v, want a multiple of 5 s after %v", st.NextFireTime, before)
	}
	for _, it := range st.Items {
		if it.NextFireTime == nil || !it.NextFireTime.Equal(*st.NextFireTime) {
			t.Errorf("item %d nextFireTime = %v, want the job's %v", it.Item, it.NextFireTime, st.NextFireTime)
		}
	}
	if err := h.Admin.SetConfig(ctx, "j", jobconfig.FieldCron, ""); err != nil {
		t.Fatal(err)
	}
	st = h.Status(t, "j")
	if st.NextFireTime != nil || st.Items[0].NextFireTime != nil {
		t.Errorf("after cron \"\": nextFireTime job %v item %v, want null", st.NextFireTime, st.Items[0].NextFireTime)
	}
}

// testAdminCumulativeCounts: the last interval's counts and the totals,
// which survive a restart of the server id.
func testAdminCumulativeCounts(t *testing.T, h *coordtest.Harness) {
	a := h.Start("a", coordtest.Config("j", 2))
	ctx := ctxT(t)
	for _, c := range [][2]int64{{7, 2}, {3, 1}} {
		if err := a.Job.ReportCounts(ctx, c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, s, f, ts, tf int64) {
		t.Helper()
		ss := h.Status(t, "j").Servers[0]
		if ss.ProcessSuccessCount != s || ss.ProcessFailureCount != f || ss.TotalSuccessCount != ts || ss.TotalFailureCount != tf {
			t.Fatalf("%s: counts %d/%d totals %d/%d, want %d/%d and %d/%d", when, ss.ProcessSuccessCount, ss.ProcessFailureCount,
				ss.TotalSuccessCount, ss.TotalFailureCount, s, f, ts, tf)
		}
	}
	check("after two intervals", 3, 1, 10, 3)
	a.Stop(t)
	a2 := h.Start("a", coordtest.Config("j", 2))
	if err := a2.Job.ReportCounts(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	check("after a restart", 1, 0, 11, 3)
}

// testAdminAudit: successful actions are recorded with who, what and when,
// newest first.
func testAdminAudit(t *testing.T, h *coordtest.Harness) {
	h.Start("a", coordtest.Config("j", 4))
	ctx := ctxT(t)
	alice := h.Admin.As("alice")
	start := time.Now().Add(-time.Second)
	if err := alice.Pause(ctx, "j", "a"); err != nil {
		t.Fatal(err)
	}
	if err := alice.DisableItem(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Admin.As("bob").SetConfig(ctx, "j", jobconfig.FieldFetchDataCount, "50"); err != nil {
		t.Fatal(err)
	}
	acts := h.Status(t, "j").Actions
	if len(acts) != 3 {
		t.Fatalf("audit log %+v, want 3 entries", acts)
	}
	if a := acts[0]; a.Actor != "bob" || a.Action != "config set" || a.Field != "fetchDataCount" || a.Value != "50" {
		t.Errorf("newest entry %+v, want bob's config set fetchDataCount=50", a)
	}
	if a := acts[1]; a.Actor != "alice" || a.Action != "disable" || a.Item == nil || *a.Item != 2 {
		t.Errorf("second entry %+v, want alice's disable of item 2", a)
	}
	if a := acts[2]; a.Actor != "alice" || a.Action != "pause" || a.Server != "a" || a.Time.Before(start) {
		t.Errorf("oldest entry %+v, want alice's pause of server a, timed", a)
	}
	for range coord.MaxAuditEntries + 5 {
		if err := alice.Resume(ctx, "j", "a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.Status(t, "j").Actions); n != coord.MaxAuditEntries {
		t.Errorf("audit log holds %d entries, want the bound %d", n, coord.MaxAuditEntries)
	}
}

// testAdminStatusTimesFromRunRecords: the status takes the items' times
// from the server's run record (no read per item: normal runs write no
// per-item node), and an item whose container holds a begin time written
// after the record (a failover run's) shows that one: here a hand-made
// lastBeginTime, created after the run.
func testAdminStatusTimesFromRunRecords(t *testing.T, h *coordtest.Harness) {
	const n = 32
	srv := h.Start("a", coordtest.Config("j", n))
	coordtest.CompleteAll(t, coordtest.BeginAll(t, srv)...)
	cs := storecount.New(h.B.Connect(t))
	st, err := coord.NewAdmin(cs, h.NS).Status(ctxT(t), "j")
	if err != nil {
		t.Fatal(err)
	}
	if err := coordtest.CheckItemTimes(ctxT(t), h.AdminStore, h.NS, "j", st); err != nil {
		t.Fatal(err)
	}
	for _, it := range st.Items {
		if !it.Completed || it.LastBeginTime == nil || it.LastCompleteTime == nil {
			t.Fatalf("item %+v after a run, want completed with both times", it)
		}
	}
	// A fixed 41 or so (config fields, servers, their records, queue,
	// audit), none per item; with each item's two times read it was about
	// 3 per item, with a listing per item 1 per item.
	if reads := cs.Counts().Reads; reads > 50 {
		t.Errorf("status at rest made %d requests for %d items, want at most 50 (the run record gives the times)", reads, n)
	}
	if _, err := h.AdminStore.Create(ctxT(t), store.Join(h.NS, "j", "execution", "3"), nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	p := store.Join(h.NS, "j", "execution", "3", "lastBeginTime")
	if _, err := h.AdminStore.Create(ctxT(t), p, []byte("12345"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	st = h.Status(t, "j") // compares every item's times with its nodes
	if got := st.Items[3].LastBeginTime; got == nil || got.UnixMilli() != 12345 {
		t.Fatalf("item 3 lastBeginTime %v after its node was re-created, want 12345 ms", got)
	}
}

// testAdminTriggerServer: a trigger of one server asks that server alone; a
// server that is not registered, paused or disabled is refused with the
// reason, and a job none of whose servers can run refuses a trigger of all
// (issue 25: `trigger --server ghost` printed "done").
func testAdminTriggerServer(t *testing.T, h *coordtest.Harness) {
	ctx := ctxT(t)
	a := h.Start("a", coordtest.Config("j", 4))
	h.Start("b", coordtest.Config("j", 4))
	asked, err := h.Admin.TriggerServer(ctx, "j", "a")
	if err != nil || !slices.Equal(asked, []string{"a"}) {
		t.Fatalf("TriggerServer(a) = %v, %v; want [a]", asked, err)
	}
	coordtest.WaitSignal(t, a.Job, protocol.SignalTrigger)
	if st := h.Status(t, "j"); st.Actions[0].Action != "trigger" || st.Actions[0].Server != "a" {
		t.Fatalf("audit %+v, want trigger of server a", st.Actions[0])
	}
	if _, err := h.Admin.TriggerServer(ctx, "j", "ghost"); !errors.Is(err, coord.ErrNoServer) {
		t.Fatalf("TriggerServer(ghost) = %v, want ErrNoServer", err)
	}
	if _, err := h.Admin.TriggerServer(ctx, "nojob", "a"); !errors.Is(err, coord.ErrNoJob) {
		t.Fatalf("TriggerServer(nojob) = %v, want ErrNoJob", err)
	}
	if err := h.Admin.Pause(ctx, "j", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Admin.TriggerServer(ctx, "j", "a"); !errors.Is(err, coord.ErrCannotRun) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("TriggerServer(paused a) = %v, want ErrCannotRun naming paused", err)
	}
	if asked, err := h.Admin.TriggerServer(ctx, "j", ""); err != nil || !slices.Equal(asked, []string{"b"}) {
		t.Fatalf("TriggerServer(every server, a paused) = %v, %v; want [b]", asked, err)
	}
	if err := h.Admin.Disable(ctx, "j", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Admin.TriggerServer(ctx, "j", "b"); !errors.Is(err, coord.ErrCannotRun) || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("TriggerServer(disabled b) = %v, want ErrCannotRun naming disabled", err)
	}
	err = h.Admin.Trigger(ctx, "j")
	if !errors.Is(err, coord.ErrCannotRun) || !strings.Contains(err.Error(), "a is paused") || !strings.Contains(err.Error(), "b is disabled") {
		t.Fatalf("Trigger with a paused and b disabled = %v, want ErrCannotRun naming both", err)
	}
}

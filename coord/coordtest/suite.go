package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
	"github.com/shardflow/shardflow/internal/testwait"
)

// Run runs the whole protocol suite on b, one subtest per behaviour.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"Registration", testRegistration},
		{"ConcurrentJoin", testConcurrentJoin},
		{"OverwriteRule", testOverwriteRule},
		{"DisableSurvivesRestart", testDisableSurvivesRestart},
		{"UnwrittenCounts", testUnwrittenCounts},
		{"Election", testElection},
		{"Resharding", testResharding},
		{"PromptReshard", testPromptReshard},
		{"BeginComplete", testBeginComplete},
		{"BeginOnLaggingAssignment", testBeginOnLaggingAssignment},
		{"BeginOnLaggingFlag", testBeginOnLaggingFlag},
		{"BeginOnLaggingFailoverQueue", testBeginOnLaggingFailoverQueue},
		{"ConfigSnapshot", testConfigSnapshot},
		{"Misfire", testMisfire},
		{"Failover", testFailover},
		{"EpochAfterFailover", func(t *testing.T, h *Harness) { testEpochAfterFailover(t, h, false) }},
		{"EpochAfterOthersFailover", func(t *testing.T, h *Harness) { testEpochAfterFailover(t, h, true) }},
		{"EpochAfterALostClaim", testEpochAfterALostClaim},
		{"Fencing", testFencing},
		{"RunFenceNormal", testRunFenceNormal},
		{"RunFenceFailover", testRunFenceFailover},
		{"SessionExpiry", testSessionExpiry},
		{"ClockSkew", testClockSkew},
		{"CorruptedConfig", testCorruptedConfig},
		{"ConfigEdits", testConfigEdits},
		{"Once", testOnce},
		{"OnceTimeout", testOnceTimeout},
		{"OnceDisabledItem", testOnceDisabledItem},
		{"Reconcile", testReconcile},
		{"Admin", testAdmin},
		{"Suspended", testSuspended},
		{"SuspendedRunAbandoned", testSuspendedRunAbandoned},
		{"PruneOfflineServers", testPruneOfflineServers},
		{"MonitorExecutionOff", testMonitorExecutionOff},
		{"MonitorExecutionOffQuiet", testMonitorExecutionOffQuiet},
		{"ShutdownCancelsRun", testShutdownCancelsRun},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each subtest has its own namespace and sessions, so they run
			// in parallel, except the ones that change the backend for
			// everyone (serial ones run first, while the others wait).
			if !serialTests[tc.name] {
				t.Parallel()
			}
			tc.fn(t, NewHarness(t, b))
		})
	}
}

// serialTests are the subtests that must not run beside others: ClockSkew
// moves the clock of the whole backend (memstore server, ZooKeeper proxy
// view of time).
var serialTests = map[string]bool{"ClockSkew": true}

var nsCounter atomic.Int64

// Harness starts servers of one job in a fresh namespace.
type Harness struct {
	t  *testing.T
	B  Backend
	NS string
	// Admin acts on the namespace through its own session.
	Admin *coord.Admin
	// AdminStore is Admin's session, for direct reads.
	AdminStore store.Store
	// Signals are the protocol events of every server the Harness starts
	// (RegistryConfig.TestSignals).
	Signals *testsignal.Coord
	// Grace is RegistryConfig.OfflineServerGrace for servers started later
	// (0: the default).
	Grace time.Duration
}

// NewHarness returns a Harness with a fresh namespace on b.
func NewHarness(t *testing.T, b Backend) *Harness {
	ns := fmt.Sprintf("coordtest%d_%d", time.Now().UnixNano()%1e6, nsCounter.Add(1))
	st := b.Connect(t)
	return &Harness{t: t, B: b, NS: ns, Admin: coord.NewAdmin(st, ns), AdminStore: st, Signals: testsignal.NewCoord()}
}

// Now is the servers' local clock: the Backend's LocalNow if it implements
// LocalClock, else time.Now.
func (h *Harness) Now() time.Time {
	if lc, ok := h.B.(LocalClock); ok {
		return lc.LocalNow()
	}
	return time.Now()
}

// Server is one simulated process with one joined job.
type Server struct {
	ID  string
	St  store.Store
	Reg *protocol.Registry
	Job *protocol.Job
}

// Config returns a job config for tests: no cron, total items, the given tweaks.
func Config(job string, total int, tweak ...func(*jobconfig.Config)) jobconfig.Config {
	c := jobconfig.Config{JobName: job, ShardingTotalCount: total, ReconcileInterval: time.Minute}
	for _, f := range tweak {
		f(&c)
	}
	return c
}

// Start connects a new session as server id and joins cfg; it fails the test on error.
func (h *Harness) Start(id string, cfg jobconfig.Config) *Server {
	h.t.Helper()
	s, err := h.TryStart(id, cfg, nil)
	if err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
	return s
}

// TryStart is Start returning the Join error; st may be nil (new session).
func (h *Harness) TryStart(id string, cfg jobconfig.Config, st store.Store) (*Server, error) {
	if st == nil {
		st = h.B.Connect(h.t)
	}
	reg, err := protocol.NewRegistry(st, protocol.RegistryConfig{Namespace: h.NS, ServerID: id, HostName: "host-" + id, Logger: quietLogger(), OfflineServerGrace: h.Grace, Now: h.Now, TestSignals: h.Signals})
	if err != nil {
		return nil, err
	}
	j, err := reg.Join(testCtx(h.t), cfg)
	if err != nil {
		_ = reg.Close(context.Background())
		return nil, err
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	return &Server{ID: id, St: st, Reg: reg, Job: j}, nil
}

// Stop closes s's Registry (a graceful leave).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.Reg.Close(testCtx(t)); err != nil {
		t.Fatalf("close %s: %v", s.ID, err)
	}
}

// BeginAll begins a run on every server concurrently (non-leaders wait for
// the leader's resharding) and returns the runs in order.
func BeginAll(t testing.TB, servers ...*Server) []*protocol.Run {
	t.Helper()
	runs := make([]*protocol.Run, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	// The runs' contexts derive from this one: it lives until the test ends.
	ctx := testCtx(t)
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

// CompleteAll completes runs.
func CompleteAll(t testing.TB, runs ...*protocol.Run) {
	t.Helper()
	for _, r := range runs {
		if err := r.Complete(testCtx(t), time.Time{}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

// AssertPartition checks that the runs' items are disjoint and cover 0..n-1.
func AssertPartition(t testing.TB, n int, runs ...*protocol.Run) [][]int {
	t.Helper()
	seen := map[int]int{}
	var out [][]int
	for i, r := range runs {
		var items []int
		for _, a := range r.Shards() {
			if prev, dup := seen[a.Item]; dup {
				t.Fatalf("item %d assigned to runs %d and %d", a.Item, prev, i)
			}
			seen[a.Item] = i
			items = append(items, a.Item)
		}
		out = append(out, items)
	}
	for it := range n {
		if _, ok := seen[it]; !ok {
			t.Fatalf("item %d assigned to no run (assignments %v)", it, out)
		}
	}
	if len(seen) != n {
		t.Fatalf("items outside 0..%d assigned: %v", n-1, out)
	}
	return out
}

// Eventually polls cond until it holds or 10 s pass (distributed
// conditions with no single signal to await; prefer Harness.Signals).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, signalWait, what, cond)
}

// signalWait bounds every wait for a protocol event.
const signalWait = 10 * time.Second

// WaitSignal waits for sig on j's Signals, skipping other signals.
func WaitSignal(t testing.TB, j *protocol.Job, sig protocol.Signal) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s, ok := <-j.Signals():
			if !ok {
				t.Fatalf("Signals closed while waiting for %v", sig)
			}
			if s == sig {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for signal %v", sig)
		}
	}
}

func status(t testing.TB, h *Harness, job string) coord.JobStatus {
	t.Helper()
	st, err := h.Admin.Status(testCtx(t), job)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

func serverStatus(t testing.TB, h *Harness, job, id string) coord.ServerStatus {
	t.Helper()
	for _, s := range status(t, h, job).Servers {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("server %s not in status", id)
	return coord.ServerStatus{}
}

func testRegistration(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4))
	if a.Reg.ServerID() != "a" {
		t.Fatalf("ServerID = %q", a.Reg.ServerID())
	}
	// A live duplicate: no wait for the other session to expire (Join
	// would wait up to the session timeout, then refuse the same way).
	dupReg, err := protocol.NewRegistry(h.B.Connect(t), protocol.RegistryConfig{Namespace: h.NS, ServerID: "a", ServerIDWait: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dupReg.Close(context.Background()) })
	_, err = dupReg.Join(testCtx(t), Config("job", 4))
	if !errors.Is(err, protocol.ErrServerIDInUse) {
		t.Fatalf("second live server with id a: err = %v, want ErrServerIDInUse", err)
	}
	ss := serverStatus(t, h, "job", "a")
	if ss.Status != "READY" || ss.HostName != "host-a" {
		t.Fatalf("server a status %+v, want READY on host-a", ss)
	}
	a.Stop(t)
	if got := serverStatus(t, h, "job", "a").Status; got != "OFFLINE" {
		t.Fatalf("after Leave status = %s, want OFFLINE", got)
	}
	if _, err := h.TryStart("a", Config("job", 4), nil); err != nil {
		t.Fatalf("restart with id a after Leave: %v", err)
	}
}

func testOverwriteRule(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4, func(c *jobconfig.Config) { c.JobParameter = "first" }))
	a.Stop(t)
	b := h.Start("b", Config("job", 8, func(c *jobconfig.Config) { c.JobParameter = "second" }))
	if got := b.Job.Config(); got.ShardingTotalCount != 4 || got.JobParameter != "first" {
		t.Fatalf("without overwrite the stored config must win: got total %d param %q", got.ShardingTotalCount, got.JobParameter)
	}
	b.Stop(t)
	c := h.Start("c", Config("job", 8, func(c *jobconfig.Config) { c.JobParameter = "third"; c.Overwrite = true }))
	if got := c.Job.Config(); got.ShardingTotalCount != 8 || got.JobParameter != "third" {
		t.Fatalf("with overwrite the local config must win: got total %d param %q", got.ShardingTotalCount, got.JobParameter)
	}
	// A stored job of another type is a conflict.
	st := h.B.Connect(t)
	if _, err := st.Set(testCtx(t), store.Join(h.NS, "job", "config", "jobType"), []byte("SIMPLE"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	bumpConfig(t, h, st, "job") // a hand edit, as docs/zookeeper-layout.md says
	_, err := h.TryStart("d", Config("job", 8), nil)
	if !errors.Is(err, protocol.ErrBadConfig) {
		t.Fatalf("jobType SIMPLE: err = %v, want ErrBadConfig", err)
	}
}

func testDisableSurvivesRestart(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4))
	if err := h.Admin.Disable(testCtx(t), "job", "a"); err != nil {
		t.Fatal(err)
	}
	a.Stop(t)
	h.Start("a", Config("job", 4))
	if !serverStatus(t, h, "job", "a").Disabled {
		t.Fatal("operator's disable was reset by a restart")
	}
	// A config asking for disabled applies only to a server never seen before.
	h.Start("b", Config("job", 4, func(c *jobconfig.Config) { c.Disabled = true }))
	if !serverStatus(t, h, "job", "b").Disabled {
		t.Fatal("new server with Disabled config is not disabled")
	}
	if err := h.Admin.Enable(testCtx(t), "job", "a"); err != nil {
		t.Fatal(err)
	}
	if serverStatus(t, h, "job", "a").Disabled {
		t.Fatal("Enable did not enable")
	}
}

// testUnwrittenCounts: on every store, the server node a join creates
// with its count nodes is marked as holding them unwritten (its data set
// in the same transaction: layout.CountsUnwritten), a restart leaves the
// mark, the first report ends it, and the totals continue across restarts
// (protocol's TestUnwrittenCountsCost counts the reads it saves).
func testUnwrittenCounts(t *testing.T, h *Harness) {
	p := layout.NewJobPaths(h.NS, "job")
	marked := func() bool {
		t.Helper()
		_, st, err := h.AdminStore.Children(testCtx(t), p.Server("a"))
		if err != nil {
			t.Fatal(err)
		}
		return layout.CountsUnwritten(st)
	}
	totals := func(when string, s, f int64) {
		t.Helper()
		if ss := serverStatus(t, h, "job", "a"); ss.TotalSuccessCount != s || ss.TotalFailureCount != f {
			t.Fatalf("%s: totals %d/%d, want %d/%d", when, ss.TotalSuccessCount, ss.TotalFailureCount, s, f)
		}
	}
	a := h.Start("a", Config("job", 2))
	a.Stop(t)
	a = h.Start("a", Config("job", 2))
	if !marked() {
		t.Fatal("the node of a server that never reported is not marked as holding unwritten counts")
	}
	totals("never reported", 0, 0)
	if err := a.Job.ReportCounts(testCtx(t), 3, 1); err != nil {
		t.Fatal(err)
	}
	if marked() {
		t.Fatal("the node of a server that reported is still marked as holding unwritten counts")
	}
	a.Stop(t)
	a = h.Start("a", Config("job", 2))
	if err := a.Job.ReportCounts(testCtx(t), 1, 0); err != nil {
		t.Fatal(err)
	}
	totals("after a restart", 4, 1)
}

func testElection(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4))
	b := h.Start("b", Config("job", 4))
	c := h.Start("c", Config("job", 4))
	if got := status(t, h, "job").Leader; got != "a" {
		t.Fatalf("leader = %q, want a (first to join)", got)
	}
	h.B.Kill(t, a.St)
	leader := h.Signals.Elected.Wait(t, signalWait, "re-election after the leader died", func(e testsignal.Event) bool {
		return e.Server == "b" || e.Server == "c"
	}).Server
	other := map[string]*Server{"b": c, "c": b}[leader]
	if leader == "b" {
		b.Stop(t)
	} else {
		c.Stop(t)
	}
	h.Signals.Elected.Wait(t, signalWait, "re-election after the leader left", func(e testsignal.Event) bool { return e.Server == other.ID })
	if got := status(t, h, "job").Leader; got != other.ID {
		t.Fatalf("leader after the re-election = %q, want %s", got, other.ID)
	}
	// The survivor reshards alone: all items are its.
	AssertPartition(t, 4, BeginAll(t, other)...)
}

func testResharding(t *testing.T, h *Harness) {
	const n = 10
	a := h.Start("a", Config("job", n))
	b := h.Start("b", Config("job", n))
	c := h.Start("c", Config("job", n))
	runs := BeginAll(t, a, b, c)
	parts := AssertPartition(t, n, runs...)
	if !slices.Equal(parts[0], []int{0, 1, 2, 9}) || !slices.Equal(parts[1], []int{3, 4, 5}) || !slices.Equal(parts[2], []int{6, 7, 8}) {
		t.Fatalf("average over a,b,c of 10 = %v, want [0 1 2 9] [3 4 5] [6 7 8]", parts)
	}
	CompleteAll(t, runs...)
	if status(t, h, "job").ReshardingPending {
		t.Fatal("resharding still pending after the runs")
	}

	d := h.Start("d", Config("job", n)) // join
	runs = BeginAll(t, a, b, c, d)
	AssertPartition(t, n, runs...)
	CompleteAll(t, runs...)

	b.Stop(t) // leave
	// The leave raises the flag; the idle leader may reshard at once.
	Eventually(t, "resharding flag (or the leader's reshard) after a leave", func() bool {
		if status(t, h, "job").ReshardingPending {
			return true
		}
		d, _, err := a.St.Get(testCtx(t), store.Join(h.NS, "job", "servers", "b", "sharding"))
		return err == nil && len(d) == 0
	})
	runs = BeginAll(t, a, c, d)
	AssertPartition(t, n, runs...)
	CompleteAll(t, runs...)

	if err := h.Admin.Disable(testCtx(t), "job", "c"); err != nil { // disable
		t.Fatal(err)
	}
	runs = BeginAll(t, a, c, d)
	if len(runs[1].Shards()) != 0 {
		t.Fatalf("disabled server c got items %v", runs[1].Shards())
	}
	AssertPartition(t, n, runs...)
	CompleteAll(t, runs...)

	if err := h.Admin.SetConfig(testCtx(t), "job", "shardingTotalCount", "6"); err != nil { // total change
		t.Fatal(err)
	}
	// One wait for the three servers: Wait discards the events it passes.
	servers, applied := map[string]*Server{"a": a, "c": c, "d": d}, map[string]bool{}
	h.Signals.ConfigApplied.Wait(t, signalWait, "the total change applied on a, c and d", func(e testsignal.ConfigApplied) bool {
		if s := servers[e.Server]; s != nil && e.Err == nil && s.Job.Config().ShardingTotalCount == 6 {
			applied[e.Server] = true
		}
		return len(applied) == len(servers)
	})
	runs = BeginAll(t, a, c, d)
	AssertPartition(t, 6, runs...)
	CompleteAll(t, runs...)
}

// testPromptReshard: in a job run only by triggers (no cron) the leader may
// never Begin again, so a non-leader waiting in Begin for the reshard must
// be served by the leader on its own once no item runs, and never while one
// runs.
func testPromptReshard(t *testing.T, h *Harness) {
	const n = 4
	a := h.Start("a", Config("job", n)) // leader; Config has no cron
	b := h.Start("b", Config("job", n))
	CompleteAll(t, BeginAll(t, a, b)...)

	// Idle leader: c joins (raising the flag) and Begins alone; a never does.
	c := h.Start("c", Config("job", n))
	runs := BeginAll(t, c)
	CompleteAll(t, runs...)
	if len(runs[0].Shards()) == 0 {
		t.Fatal("c's first run after the idle leader's reshard has no items")
	}

	// Busy leader: a run of a is in progress when d joins. The non-leader's
	// Begin waits; the leader must not reshard under a's run (its fencing
	// epoch stays valid) and must reshard once the run completes.
	aRun := BeginAll(t, a)[0]
	d := h.Start("d", Config("job", n))
	began := make(chan error, 1)
	var dRun *protocol.Run
	go func() {
		r, err := d.Job.Begin(testCtx(t), time.Now())
		dRun = r
		began <- err
	}()
	Eventually(t, "the resharding flag raised by d's join", func() bool { return status(t, h, "job").ReshardingPending })
	for _, sh := range aRun.Shards() {
		if err := aRun.CheckOwnership(testCtx(t), sh.Item); err != nil {
			t.Fatalf("leader resharded during its own run: CheckOwnership(%d): %v", sh.Item, err)
		}
	}
	select {
	case err := <-began:
		t.Fatalf("d's Begin returned while the leader's run was in progress (err %v): resharded during a run", err)
	default:
	}
	CompleteAll(t, aRun)
	select {
	case err := <-began:
		if err != nil {
			t.Fatalf("d's Begin after the leader's run completed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("d's Begin still waiting 10s after the leader's run completed: the idle leader did not reshard")
	}
	CompleteAll(t, dRun)
	runs = BeginAll(t, a, b, c, d)
	AssertPartition(t, n, runs...)
	CompleteAll(t, runs...)
}

func testBeginComplete(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4))
	runs := BeginAll(t, a)
	AssertPartition(t, 4, runs...)
	st := status(t, h, "job")
	if st.Servers[0].Status != "RUNNING" {
		t.Fatalf("server status during a run = %s, want RUNNING", st.Servers[0].Status)
	}
	for _, it := range st.Items {
		if !it.Running || it.Completed || it.LastBeginTime == nil {
			t.Fatalf("item during run: %+v, want running with lastBeginTime", it)
		}
	}
	next := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if err := runs[0].Complete(testCtx(t), next); err != nil {
		t.Fatal(err)
	}
	st = status(t, h, "job")
	if st.Servers[0].Status != "READY" {
		t.Fatalf("server status after the run = %s, want READY", st.Servers[0].Status)
	}
	for _, it := range st.Items {
		// Status derives the next fire time from the cron; this job has none.
		if it.Running || !it.Completed || it.LastCompleteTime == nil || it.NextFireTime != nil {
			t.Fatalf("item after run: %+v, want completed with times and no nextFireTime (no cron)", it)
		}
	}
	if err := a.Job.ReportCounts(testCtx(t), 7, 2); err != nil {
		t.Fatal(err)
	}
	if ss := serverStatus(t, h, "job", "a"); ss.ProcessSuccessCount != 7 || ss.ProcessFailureCount != 2 {
		t.Fatalf("counts %d/%d, want 7/2", ss.ProcessSuccessCount, ss.ProcessFailureCount)
	}
}

func testMisfire(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 3))
	runs := BeginAll(t, a)
	if _, err := a.Job.Begin(testCtx(t), time.Now()); !errors.Is(err, protocol.ErrItemsRunning) {
		t.Fatalf("Begin during a run: err = %v, want ErrItemsRunning", err)
	}
	for _, it := range status(t, h, "job").Items {
		if !it.Misfire {
			t.Fatalf("item %d not flagged misfire after the first overlapping trigger", it.Item)
		}
	}
	CompleteAll(t, runs...)
	ok, err := a.Job.TakeMisfire(testCtx(t))
	if err != nil || !ok {
		t.Fatalf("TakeMisfire = %v, %v; want true", ok, err)
	}
	ok, err = a.Job.TakeMisfire(testCtx(t))
	if err != nil || ok {
		t.Fatalf("second TakeMisfire = %v, %v; want false (flags cleared)", ok, err)
	}
	for _, it := range status(t, h, "job").Items {
		if it.Misfire {
			t.Fatalf("item %d still flagged misfire", it.Item)
		}
	}
}

func withFailover(c *jobconfig.Config) { c.Failover = true }

func testFailover(t *testing.T, h *Harness) {
	const n = 6
	c := h.Start("c", Config("job", n, withFailover)) // leader
	a := h.Start("a", Config("job", n, withFailover))
	b := h.Start("b", Config("job", n, withFailover))
	runs := BeginAll(t, c, a, b)
	parts := AssertPartition(t, n, runs...)
	CompleteAll(t, runs[0], runs[2]) // c and b finish; a crashes mid-run
	aItems := parts[1]
	h.B.Kill(t, a.St)
	h.Signals.FailoverQueued.Wait(t, signalWait, "a's unfinished items queued for failover", func(e testsignal.Queued) bool {
		return slices.Equal(e.Items, aItems)
	})
	if q := status(t, h, "job").FailoverQueue; !slices.Equal(q, aItems) {
		t.Fatalf("failover queue = %v, want a's items %v", q, aItems)
	}
	WaitSignal(t, b.Job, protocol.SignalFailover)
	ok, err := b.Job.ClaimFailover(testCtx(t))
	if err != nil || !ok {
		t.Fatalf("ClaimFailover = %v, %v", ok, err)
	}
	run, err := b.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sh := run.Shards()
	if len(sh) != 1 || !sh[0].Failover || sh[0].Item != aItems[0] {
		t.Fatalf("failover run shards = %+v, want item %d as failover", sh, aItems[0])
	}
	if err := run.CheckOwnership(testCtx(t), sh[0].Item); err != nil {
		t.Fatalf("CheckOwnership of a claimed item: %v", err)
	}
	// The claimer dies mid-run. Two correct outcomes race: the leader
	// queues the item again (failover), or, with no item running any more,
	// it reshards and the survivor owns the item outright (a reshard drops
	// queue entries of items that got an owner). Either way the survivor's
	// next run carries the item and nothing is left behind.
	h.B.Kill(t, b.St)
	item := aItems[0]
	Eventually(t, "a dead claimer's item queued again or resharded to the survivor", func() bool {
		st := status(t, h, "job")
		queued := slices.Contains(st.FailoverQueue, item) && st.Items[item].Failover == ""
		resharded := !st.ReshardingPending && slices.Contains(serverStatus(t, h, "job", "c").Sharding, item)
		return queued || resharded
	})
	// The survivor claims queued items one per claim, lowest first, and a
	// run with claimed items runs only those (as the Node does). a's other
	// item, never claimed, may still be queued ahead of this one after the
	// reshard branch, so the item comes in one of the survivor's next runs,
	// at most one per queued item later.
	var seen [][]protocol.Assignment
	for len(seen) <= len(aItems) {
		if _, err := c.Job.ClaimFailover(testCtx(t)); err != nil {
			t.Fatalf("c ClaimFailover: %v", err)
		}
		run, err = c.Job.Begin(testCtx(t), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, run.Shards())
		CompleteAll(t, run)
		if slices.ContainsFunc(run.Shards(), func(a protocol.Assignment) bool { return a.Item == item }) {
			break
		}
	}
	if last := seen[len(seen)-1]; !slices.ContainsFunc(last, func(a protocol.Assignment) bool { return a.Item == item }) {
		t.Fatalf("the survivor's runs %+v lack the dead claimer's item %d", seen, item)
	}
	st := status(t, h, "job")
	for _, it := range st.Items {
		if it.Failover != "" {
			t.Fatalf("failover node left behind on item %d: %+v", it.Item, it)
		}
	}
	// failover=false clears the queue and failover nodes.
	if err := h.Admin.SetConfig(testCtx(t), "job", "failover", "false"); err != nil {
		t.Fatal(err)
	}
	st = status(t, h, "job")
	if len(st.FailoverQueue) != 0 {
		t.Fatalf("failover queue after failover=false: %v", st.FailoverQueue)
	}
	// The next reshard gives everything to the survivor.
	AssertPartition(t, n, BeginAll(t, c)...)
}

// runsCarry begins and completes one run on each server and reports whether
// any of them carried item.
func runsCarry(t *testing.T, item int, servers ...*Server) bool {
	runs := BeginAll(t, servers...)
	defer CompleteAll(t, runs...)
	for _, r := range runs {
		for _, s := range r.Shards() {
			if s.Item == item {
				return true
			}
		}
	}
	return false
}

func testFencing(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4))
	runs := BeginAll(t, a)
	r := runs[0]
	item := r.Shards()[0].Item
	if err := r.CheckOwnership(testCtx(t), item); err != nil {
		t.Fatalf("CheckOwnership of an owned item: %v", err)
	}
	CompleteAll(t, r)
	// A reshard changes the epoch.
	run2 := BeginAll(t, a)[0]
	b := h.Start("b", Config("job", 4))
	CompleteAll(t, run2)
	runs = BeginAll(t, a, b)
	if err := run2.CheckOwnership(testCtx(t), item); !errors.Is(err, protocol.ErrNotOwner) {
		t.Fatalf("CheckOwnership of the pre-reshard run: %v, want ErrNotOwner", err)
	}
	for _, sh := range runs[0].Shards() {
		if sh.Epoch <= run2.Shards()[0].Epoch {
			t.Fatalf("epoch did not grow across a reshard: %d -> %d", run2.Shards()[0].Epoch, sh.Epoch)
		}
		if err := runs[0].CheckOwnership(testCtx(t), sh.Item); err != nil {
			t.Fatalf("CheckOwnership after reshard: %v", err)
		}
	}
	if err := runs[0].CheckOwnership(testCtx(t), 99); !errors.Is(err, protocol.ErrNotOwner) {
		t.Fatalf("CheckOwnership of an item not in the run: %v", err)
	}
	// Session loss fences.
	h.B.Expire(t, a.St)
	select {
	case <-runs[0].Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("run context not cancelled on session expiry")
	}
	err := runs[0].CheckOwnership(testCtx(t), runs[0].Shards()[0].Item)
	if !errors.Is(err, protocol.ErrSessionLost) && !errors.Is(err, protocol.ErrNotOwner) {
		t.Fatalf("CheckOwnership after session loss: %v", err)
	}
	if runs[0].KeepGoing() {
		t.Fatal("KeepGoing true after session loss")
	}
	if err := runs[0].Complete(testCtx(t), time.Time{}); err == nil {
		t.Fatal("Complete after session loss succeeded")
	}
}

func testSessionExpiry(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	lost := a.Job.Lost()
	runs := BeginAll(t, a)
	h.B.Expire(t, a.St)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed on session expiry")
	}
	select {
	case <-runs[0].Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("run context not cancelled on session expiry")
	}
	// The job re-registers by itself on the new session and runs again.
	Eventually(t, "re-registration on the new session", func() bool {
		return serverStatus(t, h, "job", "a").Status == "READY" && a.Job.Lost() != lost
	})
	runs = BeginAll(t, a)
	AssertPartition(t, 2, runs...)
	CompleteAll(t, runs...)
}

func testClockSkew(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2, func(c *jobconfig.Config) { c.MaxTimeDiff = 5 * time.Second }))
	h.B.SkewServerClock(t, time.Hour)
	defer h.B.SkewServerClock(t, 0)
	_, err := a.Job.Begin(testCtx(t), h.Now())
	var cse *protocol.ClockSkewError
	if !errors.As(err, &cse) || !errors.Is(err, protocol.ErrClockSkew) {
		t.Fatalf("Begin with a 1h skew: err = %v, want *ClockSkewError", err)
	}
	if d := cse.Coordinator.Sub(cse.Local); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("clocks in the error differ by %v, want ~1h (%v vs %v)", d, cse.Local, cse.Coordinator)
	}
	if le := serverStatus(t, h, "job", "a").LastError; le == "" {
		t.Fatal("clock skew not recorded in lastError")
	}
	h.B.SkewServerClock(t, 0)
	runs := BeginAll(t, a)
	CompleteAll(t, runs...)
	if le := serverStatus(t, h, "job", "a").LastError; le != "" {
		t.Fatalf("lastError not cleared after a good run: %q", le)
	}
}

func testCorruptedConfig(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	other := h.Start("a", Config("other", 2))
	adminSt := h.B.Connect(t)
	ctx := testCtx(t)
	for _, tc := range []struct{ field, value string }{{"shardingTotalCount", "abc"}, {"cron", "not a cron"}} {
		path := store.Join(h.NS, "job", "config", tc.field)
		old, _, err := adminSt.Get(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adminSt.Set(ctx, path, []byte(tc.value), store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		// A hand edit is followed by a bump of the config node, which is
		// what servers watch (docs/zookeeper-layout.md).
		bumpConfig(t, h, adminSt, "job")
		// The edit reaches the job through its watch.
		h.Signals.ConfigApplied.Wait(t, signalWait, "the job refusing the corrupted config", func(e testsignal.ConfigApplied) bool {
			return e.Server == "a" && e.Job == "job" && errors.Is(e.Err, protocol.ErrBadConfig)
		})
		_, err = a.Job.Begin(ctx, time.Now())
		if !errors.Is(err, protocol.ErrBadConfig) || !strings.Contains(err.Error(), "config/"+tc.field) {
			t.Fatalf("%s=%q: Begin err = %v, want ErrBadConfig naming config/%s", tc.field, tc.value, err, tc.field)
		}
		st := status(t, h, "job")
		if !strings.Contains(st.ConfigError, tc.field) {
			t.Fatalf("Status ConfigError = %q, want it to name %s", st.ConfigError, tc.field)
		}
		if le := serverStatus(t, h, "job", "a").LastError; !strings.Contains(le, tc.field) {
			t.Fatalf("lastError = %q, want it to name %s", le, tc.field)
		}
		if _, err := h.TryStart("b", Config("job", 2), nil); !errors.Is(err, protocol.ErrBadConfig) {
			t.Fatalf("join with corrupted stored config: %v, want ErrBadConfig", err)
		}
		// The other job in the namespace keeps working.
		runs := BeginAll(t, other)
		AssertPartition(t, 2, runs...)
		CompleteAll(t, runs...)
		if _, err := adminSt.Set(ctx, path, old, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		bumpConfig(t, h, adminSt, "job")
		h.Signals.ConfigApplied.Wait(t, signalWait, "the repaired config applied", func(e testsignal.ConfigApplied) bool {
			return e.Server == "a" && e.Job == "job" && e.Err == nil
		})
		r, err := a.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("Begin on the repaired config: %v", err)
		}
		if err := r.Complete(ctx, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
}

// testConfigEdits: servers watch the config node only (its data version
// bumped by every config writer), not each field: an edit through the
// Admin, a hand edit followed by a bump, and an edit made while a server's
// session is suspended all reach every joined server.
func testConfigEdits(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	b := h.Start("b", Config("job", 2))
	ctx := testCtx(t)
	adminSt := h.B.Connect(t)
	configNode := store.Join(h.NS, "job", "config")
	version := func() int32 {
		_, st, err := adminSt.Get(ctx, configNode)
		if err != nil {
			t.Fatal(err)
		}
		return st.Version
	}
	// applied waits until each of servers has applied jobParameter=param
	// (the signals of several servers come in any order).
	applied := func(what, param string, servers ...*Server) {
		t.Helper()
		left := map[string]*Server{}
		for _, s := range servers {
			left[s.ID] = s
		}
		for len(left) > 0 {
			h.Signals.ConfigApplied.Wait(t, signalWait, what, func(e testsignal.ConfigApplied) bool {
				s := left[e.Server]
				if e.Job != "job" || s == nil || e.Err != nil || s.Job.Config().JobParameter != param {
					return false
				}
				delete(left, e.Server)
				return true
			})
		}
	}
	// Through the Admin: the field and the config node's version together.
	v0 := version()
	if err := h.Admin.SetConfig(ctx, "job", "jobParameter", "p1"); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v0+1 {
		t.Fatalf("config node version after SetConfig = %d, want %d (bumped once)", v, v0+1)
	}
	// Its data is a copy of every field node.
	data, _, err := adminSt.Get(ctx, configNode)
	if err != nil {
		t.Fatal(err)
	}
	var copied map[string]map[string]string
	if err := json.Unmarshal(data, &copied); err != nil {
		t.Fatalf("config node data %q: %v", data, err)
	}
	names, _, err := adminSt.Children(ctx, configNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		d, _, err := adminSt.Get(ctx, store.Join(configNode, n))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := copied["shardflowConfigFields"][n]; !ok || got != string(d) {
			t.Fatalf("config node's copy of %s = %q (present %v), the field node holds %q", n, got, ok, d)
		}
	}
	if len(copied["shardflowConfigFields"]) != len(names) {
		t.Fatalf("config node's copy has %d fields, the node %d", len(copied["shardflowConfigFields"]), len(names))
	}
	applied("the Admin's edit", "p1", a, b)
	// By hand: the field node, then the copy cleared (the version bumped).
	if _, err := adminSt.Set(ctx, store.Join(configNode, "jobParameter"), []byte("p2"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	bumpConfig(t, h, adminSt, "job")
	applied("the hand edit", "p2", a, b)
	// While b's session is suspended: b applies it once reconnected.
	h.B.Disconnect(t, b.St)
	if err := h.Admin.SetConfig(ctx, "job", "jobParameter", "p3"); err != nil {
		t.Fatal(err)
	}
	applied("the edit made while b was suspended", "p3", a)
	h.B.Reconnect(t, b.St)
	applied("the edit made while b was suspended", "p3", b)
	runs := BeginAll(t, a, b)
	AssertPartition(t, 2, runs...)
	for _, r := range runs {
		if p := r.Config().JobParameter; p != "p3" {
			t.Fatalf("run's jobParameter = %q, want p3", p)
		}
	}
	CompleteAll(t, runs...)
}

// bumpConfig bumps the data version of job's config node, as an operator
// does after editing a field node by hand.
func bumpConfig(t *testing.T, h *Harness, st store.Store, job string) {
	t.Helper()
	if _, err := st.Set(testCtx(t), store.Join(h.NS, job, "config"), nil, store.AnyVersion); err != nil {
		t.Fatalf("bump %s's config node: %v", job, err)
	}
}

func testOnce(t *testing.T, h *Harness) {
	const n = 6
	servers := []*Server{h.Start("a", Config("job", n)), h.Start("b", Config("job", n)), h.Start("c", Config("job", n))}
	// The first round's runs begin while the joins are still being
	// resharded: every join raises the flag itself and the leader's reshard
	// cannot clear it on a membership that misses one, so the runs still
	// partition the items and the callback runs once.
	for round := range 3 {
		runs := BeginAll(t, servers...)
		AssertPartition(t, n, runs...)
		var calls atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, len(servers))
		for i, s := range servers {
			var items []int
			for _, a := range runs[i].Shards() {
				items = append(items, a.Item)
			}
			wg.Go(func() {
				errs[i] = s.Job.Once(testCtx(t), "started", items, 10*time.Second, func(context.Context) error {
					calls.Add(1)
					return nil
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Once on %s: %v", round, servers[i].ID, err)
			}
		}
		if got := calls.Load(); got != 1 {
			t.Fatalf("round %d: fn ran %d times, want exactly once", round, got)
		}
		CompleteAll(t, runs...)
	}
}

// runOnce calls Once on every server with its run's items and returns how
// many times fn ran.
func runOnce(t *testing.T, servers []*Server, runs []*protocol.Run, phase string) int64 {
	t.Helper()
	var calls atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		var items []int
		for _, a := range runs[i].Shards() {
			items = append(items, a.Item)
		}
		wg.Go(func() {
			errs[i] = s.Job.Once(testCtx(t), phase, items, 10*time.Second, func(context.Context) error {
				calls.Add(1)
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Once on %s: %v", servers[i].ID, err)
		}
	}
	return calls.Load()
}

// testOnceDisabledItem: an item disabled by an operator runs nowhere, so
// the barrier must not wait for it.
func testOnceDisabledItem(t *testing.T, h *Harness) {
	const n = 4
	servers := []*Server{h.Start("a", Config("job", n)), h.Start("b", Config("job", n))}
	if err := h.Admin.DisableItem(testCtx(t), "job", 1); err != nil {
		t.Fatal(err)
	}
	var runs []*protocol.Run
	Eventually(t, "item 1 excluded from the runs", func() bool {
		runs = BeginAll(t, servers...)
		for _, r := range runs {
			for _, s := range r.Shards() {
				if s.Item == 1 {
					CompleteAll(t, runs...)
					return false
				}
			}
		}
		return true
	})
	if got := runOnce(t, servers, runs, "completed"); got != 1 {
		t.Fatalf("fn ran %d times with item 1 disabled, want exactly once", got)
	}
	CompleteAll(t, runs...)
	// Enabled again, the barrier waits for it again and still runs once.
	if err := h.Admin.EnableItem(testCtx(t), "job", 1); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "item 1 back in the runs", func() bool {
		runs = BeginAll(t, servers...)
		for _, r := range runs {
			for _, s := range r.Shards() {
				if s.Item == 1 {
					return true
				}
			}
		}
		CompleteAll(t, runs...)
		return false
	})
	if got := runOnce(t, servers, runs, "completed"); got != 1 {
		t.Fatalf("fn ran %d times after item 1 was enabled again, want exactly once", got)
	}
	CompleteAll(t, runs...)
}

func testOnceTimeout(t *testing.T, h *Harness) {
	const n = 4
	a := h.Start("a", Config("job", n))
	b := h.Start("b", Config("job", n))
	runs := BeginAll(t, a, b)
	var items []int
	for _, s := range runs[0].Shards() {
		items = append(items, s.Item)
	}
	// b dies before registering: a waits, times out, clears its registration.
	h.B.Kill(t, b.St)
	called := false
	err := a.Job.Once(testCtx(t), "completed", items, 200*time.Millisecond, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, protocol.ErrGuaranteeTimeout) || called {
		t.Fatalf("Once with a dead peer: err = %v, called = %v; want ErrGuaranteeTimeout, not called", err, called)
	}
	kids, _, err := h.B.Connect(t).Children(testCtx(t), store.Join(h.NS, "job", "guarantee", "completed"))
	if err != nil || len(kids) != 0 {
		t.Fatalf("guarantee/completed after timeout: %v, %v; want empty", kids, err)
	}
}

func testReconcile(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 4, func(c *jobconfig.Config) { c.ReconcileInterval = time.Second }))
	runs := BeginAll(t, a)
	CompleteAll(t, runs...)
	st := h.B.Connect(t)
	ctx := testCtx(t)
	// Corrupt the assignment behind the protocol's back: item 3 owned by a
	// server that is not live, and the flag cleared.
	if _, err := st.Set(ctx, store.Join(h.NS, "job", "servers", "a", "sharding"), []byte("0,1,2"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateAll(ctx, st, store.Join(h.NS, "job", "servers", "ghost")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, store.Join(h.NS, "job", "servers", "ghost", "sharding"), []byte("3"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	_ = st.Delete(ctx, store.Join(h.NS, "job", "leader", "sharding", "necessary"), store.AnyVersion)
	// Reconcile raises the flag; the idle leader then reshards at once, so
	// either state shows that reconcile acted.
	Eventually(t, "reconcile raising the resharding flag (or the leader resharding)", func() bool {
		if status(t, h, "job").ReshardingPending {
			return true
		}
		d, _, err := st.Get(ctx, store.Join(h.NS, "job", "servers", "a", "sharding"))
		return err == nil && string(d) == "0,1,2,3"
	})
	AssertPartition(t, 4, BeginAll(t, a)...)
}

func testAdmin(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	a := h.Start("a", Config("job", 4))
	b := h.Start("b", Config("job", 4))
	jobs, err := h.Admin.Jobs(ctx)
	if err != nil || !slices.Equal(jobs, []string{"job"}) {
		t.Fatalf("Jobs = %v, %v", jobs, err)
	}
	if _, err := h.Admin.Status(ctx, "nope"); !errors.Is(err, coord.ErrNoJob) {
		t.Fatalf("Status of a missing job: %v, want ErrNoJob", err)
	}
	if err := h.Admin.Pause(ctx, "job", "nope"); !errors.Is(err, coord.ErrNoServer) {
		t.Fatalf("Pause of a missing server: %v, want ErrNoServer", err)
	}
	// Trigger.
	if err := h.Admin.Trigger(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	WaitSignal(t, a.Job, protocol.SignalTrigger)
	WaitSignal(t, b.Job, protocol.SignalTrigger)
	// Pause / resume.
	runs := BeginAll(t, a, b)
	if err := h.Admin.Pause(ctx, "job", "a"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "KeepGoing false when paused", func() bool { return !runs[0].KeepGoing() })
	if !runs[1].KeepGoing() {
		t.Fatal("KeepGoing false on the server that was not paused")
	}
	CompleteAll(t, runs...)
	if _, err := a.Job.Begin(ctx, time.Now()); !errors.Is(err, protocol.ErrPaused) {
		t.Fatalf("Begin while paused: %v, want ErrPaused", err)
	}
	if err := h.Admin.Resume(ctx, "job", ""); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "resume", func() bool {
		r, err := a.Job.Begin(ctx, time.Now())
		if err != nil {
			return false
		}
		return r.Complete(ctx, time.Time{}) == nil
	})
	// DisableItem.
	if err := h.Admin.DisableItem(ctx, "job", 0); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "item 0 disabled", func() bool { return !runsCarry(t, 0, a, b) })
	if err := h.Admin.EnableItem(ctx, "job", 0); err != nil {
		t.Fatal(err)
	}
	// Item flags reach the servers through their watches.
	Eventually(t, "item 0 enabled again", func() bool { return runsCarry(t, 0, a, b) })
	// Remove refuses live servers.
	if err := h.Admin.Remove(ctx, "job", "b"); err == nil {
		t.Fatal("Remove of a live server succeeded")
	}
	// Shutdown b.
	if err := h.Admin.Shutdown(ctx, "job", "b"); err != nil {
		t.Fatal(err)
	}
	WaitSignal(t, b.Job, protocol.SignalShutdown)
	if _, err := b.Job.Begin(ctx, time.Now()); !errors.Is(err, protocol.ErrShutdown) {
		t.Fatalf("Begin after shutdown: %v, want ErrShutdown", err)
	}
	Eventually(t, "b offline", func() bool { return serverStatus(t, h, "job", "b").Status == "OFFLINE" })
	runs = BeginAll(t, a)
	AssertPartition(t, 4, runs...)
	CompleteAll(t, runs...)
	if err := h.Admin.Remove(ctx, "job", "b"); err != nil {
		t.Fatalf("Remove of an offline server: %v", err)
	}
	// Config get/set.
	if err := h.Admin.SetConfig(ctx, "job", "shardingTotalCount", "0"); err == nil {
		t.Fatal("SetConfig accepted shardingTotalCount 0")
	}
	if err := h.Admin.SetConfig(ctx, "job", "jobParameter", "p2"); err != nil {
		t.Fatal(err)
	}
	cfg, err := h.Admin.Config(ctx, "job")
	if err != nil || cfg.JobParameter != "p2" {
		t.Fatalf("Config after set: %+v, %v", cfg.JobParameter, err)
	}
	WaitSignal(t, a.Job, protocol.SignalConfigChanged)
	h.Signals.ConfigApplied.Wait(t, signalWait, "the config edit applied on a", func(e testsignal.ConfigApplied) bool {
		return e.Server == "a" && a.Job.Config().JobParameter == "p2"
	})
	// Remove the whole job: refused while a is live, then done.
	if err := h.Admin.Remove(ctx, "job", ""); err == nil {
		t.Fatal("Remove of a job with a live server succeeded")
	}
	if err := h.Admin.Shutdown(ctx, "job", ""); err != nil {
		t.Fatal(err)
	}
	WaitSignal(t, a.Job, protocol.SignalShutdown)
	Eventually(t, "a offline", func() bool { return serverStatus(t, h, "job", "a").Status == "OFFLINE" })
	if err := h.Admin.Remove(ctx, "job", ""); err != nil {
		t.Fatalf("Remove of a stopped job: %v", err)
	}
	WaitSignal(t, a.Job, protocol.SignalRemoved)
}

func testSuspended(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	runs := BeginAll(t, a)
	h.B.Disconnect(t, a.St)
	// A new run is refused while suspended; the running one goes on.
	Eventually(t, "Begin refused while suspended", func() bool {
		_, err := a.Job.Begin(testCtx(t), time.Now())
		return errors.Is(err, protocol.ErrSessionLost)
	})
	if err := runs[0].Context().Err(); err != nil {
		t.Fatalf("run cancelled while merely suspended: %v", err)
	}
	// Complete waits for the session to resume within its ctx; when ctx
	// ends first it returns ErrSessionLost and the job writes the
	// completion once the same session resumes (the running nodes must
	// not outlive the run on the resumed session).
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	err := runs[0].Complete(short, time.Time{})
	cancel()
	if !errors.Is(err, protocol.ErrSessionLost) {
		t.Fatalf("Complete while suspended: %v, want ErrSessionLost", err)
	}
	if err := runs[0].Context().Err(); err == nil {
		t.Fatal("run context still live after Complete")
	}
	h.B.Reconnect(t, a.St)
	Eventually(t, "the completion written after the session resumed", func() bool {
		for _, it := range status(t, h, "job").Items {
			if it.Running || !it.Completed {
				return false
			}
		}
		return true
	})
	if err := runs[0].Complete(testCtx(t), time.Time{}); err != nil {
		t.Fatalf("Complete again after the completion was written: %v, want nil", err)
	}
	runs = BeginAll(t, a)
	AssertPartition(t, 2, runs...)
	CompleteAll(t, runs...)
}

// testSuspendedRunAbandoned: a run whose Complete gave up while the session
// was suspended, and is never retried (the Node gives up on a cancelled run),
// must not leave running nodes on a session that comes back: the next Begin
// must run the items, not call every later trigger a misfire (the ensemble
// fault test stalled for good this way when a quorum leader was stopped
// mid-run), and the leader's reshard must not wait on them for ever (the
// simulation's seeds 1001 and 1007). The job writes the parked completion
// when the session resumes.
func testSuspendedRunAbandoned(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	old := BeginAll(t, a)
	h.B.Disconnect(t, a.St)
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	err := old[0].Complete(short, time.Time{})
	cancel()
	if !errors.Is(err, protocol.ErrSessionLost) {
		t.Fatalf("Complete while suspended: %v, want ErrSessionLost", err)
	}
	h.B.Reconnect(t, a.St)
	var runs []*protocol.Run
	Eventually(t, "Begin after the session resumed", func() bool {
		// ErrItemsRunning only until the job wrote the parked completion.
		r, err := a.Job.Begin(testCtx(t), time.Now())
		if err == nil {
			runs = append(runs, r)
		}
		return err == nil
	})
	AssertPartition(t, 2, runs...)
	// A late retry of the old Complete must not complete the new run's items.
	if err := old[0].Complete(testCtx(t), time.Time{}); err != nil && !errors.Is(err, protocol.ErrNotOwner) {
		t.Fatalf("late Complete of the abandoned run: %v, want nil (already done) or ErrNotOwner", err)
	}
	for _, it := range status(t, h, "job").Items {
		if !it.Running {
			t.Fatalf("item %d not running after the old run's late Complete: %+v", it.Item, it)
		}
	}
	CompleteAll(t, runs...)
	for _, it := range status(t, h, "job").Items {
		if it.Running || !it.Completed {
			t.Fatalf("item %d after Complete: %+v, want completed, not running", it.Item, it)
		}
	}
}

func testPruneOfflineServers(t *testing.T, h *Harness) {
	h.Grace = time.Millisecond
	fast := func(c *jobconfig.Config) { c.ReconcileInterval = time.Second }
	h.Start("a", Config("job", 2, fast)) // leader
	b := h.Start("b", Config("job", 2, fast))
	c := h.Start("c", Config("job", 2, fast))
	if err := h.Admin.Disable(testCtx(t), "job", "c"); err != nil {
		t.Fatal(err)
	}
	b.Stop(t)
	c.Stop(t)
	Eventually(t, "offline server b pruned by the leader", func() bool {
		for _, s := range status(t, h, "job").Servers {
			if s.ID == "b" {
				return false
			}
		}
		return true
	})
	if !serverStatus(t, h, "job", "c").Disabled {
		t.Fatal("operator-disabled offline server c was pruned or re-enabled")
	}
}

func testMonitorExecutionOff(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 3))
	runs := BeginAll(t, a)
	if err := h.Admin.SetConfig(testCtx(t), "job", "monitorExecution", "false"); err != nil {
		t.Fatal(err)
	}
	for _, it := range status(t, h, "job").Items {
		if it.Running {
			t.Fatalf("item %d still running after monitorExecution=false", it.Item)
		}
	}
	h.Signals.ConfigApplied.Wait(t, signalWait, "monitorExecution=false applied on a", func(e testsignal.ConfigApplied) bool {
		return e.Server == "a" && !a.Job.Config().MonitorsExecution()
	})
	// Without monitoring, runs record no running/completed nodes.
	if err := runs[0].Complete(testCtx(t), time.Time{}); err != nil {
		t.Fatalf("Complete after monitorExecution=false: %v", err)
	}
	runs = BeginAll(t, a)
	for _, it := range status(t, h, "job").Items {
		if it.Running {
			t.Fatalf("item %d marked running with monitorExecution=false", it.Item)
		}
	}
	CompleteAll(t, runs...)
}

func testShutdownCancelsRun(t *testing.T, h *Harness) {
	a := h.Start("a", Config("job", 2))
	b := h.Start("b", Config("job", 2))
	runs := BeginAll(t, a, b)
	if err := h.Admin.Shutdown(testCtx(t), "job", "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-runs[1].Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b's run context not cancelled by an operator shutdown")
	}
	if runs[1].KeepGoing() {
		t.Fatal("KeepGoing true after shutdown")
	}
	if err := runs[0].Context().Err(); err != nil {
		t.Fatalf("a's run cancelled by b's shutdown: %v", err)
	}
	// The Node completes a cancelled run too: its running nodes go.
	CompleteAll(t, runs...)
	// b went offline: the next trigger gives a every item.
	Eventually(t, "b offline", func() bool { return serverStatus(t, h, "job", "b").Status == "OFFLINE" })
	runs = BeginAll(t, a)
	AssertPartition(t, 2, runs...)
	CompleteAll(t, runs...)
	// A restart clears the shutdown flag.
	b.Stop(t)
	b2 := h.Start("b", Config("job", 2))
	if serverStatus(t, h, "job", "b").Shutdown {
		t.Fatal("shutdown flag survived a restart")
	}
	runs = BeginAll(t, a, b2)
	AssertPartition(t, 2, runs...)
	CompleteAll(t, runs...)
}

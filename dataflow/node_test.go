package dataflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/internal/testsignal"
	"github.com/shardflow/shardflow/internal/testwait"
)

// itemJob processes one value per shard item and run: its item number. It
// records which items it processed.
type itemJob struct {
	mu    sync.Mutex
	items []int
	// block, when set, makes Process wait for ctx's end and report it.
	block   bool
	blocked chan struct{} // receives when Process starts blocking
	unblock chan error    // receives ctx.Err() when a blocked Process returns
}

func (j *itemJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }

func (j *itemJob) Process(ctx context.Context, s Shard, v int) error {
	j.mu.Lock()
	j.items = append(j.items, v)
	j.mu.Unlock()
	if j.block {
		j.blocked <- struct{}{}
		<-ctx.Done()
		j.unblock <- ctx.Err()
	}
	return nil
}

func (j *itemJob) take() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.items
	j.items = nil
	slices.Sort(out)
	return out
}

type runEvent struct {
	info RunInfo
	res  RunResult
}

// afterListener sends every finished run on runs.
type afterListener struct {
	runs   chan runEvent
	before chan RunInfo
}

func newAfterListener() *afterListener {
	return &afterListener{runs: make(chan runEvent, 16), before: make(chan RunInfo, 16)}
}

func (l *afterListener) BeforeRun(_ context.Context, info RunInfo) { l.before <- info }
func (l *afterListener) AfterRun(_ context.Context, info RunInfo, res RunResult) {
	l.runs <- runEvent{info, res}
}

func (l *afterListener) next(t *testing.T) runEvent {
	t.Helper()
	select {
	case ev := <-l.runs:
		return ev
	case <-time.After(20 * time.Second):
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("no run finished within 20s; goroutines:\n%s", stacks.String())
		return runEvent{}
	}
}

func stopNode(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// startNodeWithJob returns a started Node of cfg hosting job as jcfg, with
// an afterListener on the job. The caller stops the Node (stopNode).
func startNodeWithJob(t *testing.T, cfg NodeConfig, jcfg JobConfig, job Job[int]) (*Node, *afterListener) {
	t.Helper()
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newAfterListener()
	err = AddJob(t.Context(), n, jcfg, job, WithListeners(l))
	if err == nil {
		err = n.Start(t.Context())
	}
	if err != nil {
		stopNode(t, n)
		t.Fatal(err)
	}
	return n, l
}

func TestNodeEmbeddedRunAndListeners(t *testing.T) {
	var mu sync.Mutex
	var hookErrs []error
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "solo", OnError: func(_ string, err error) {
		mu.Lock()
		hookErrs = append(hookErrs, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	j := &itemJob{}
	l := newAfterListener()
	cfg := JobConfig{JobName: "solo-job", ShardingTotalCount: 4, ShardingItemParameters: "0=a,3=d"}
	if err := AddJob(t.Context(), n, cfg, Job[int](j), WithListeners(l)); err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, cfg, Job[int](j)); !errors.Is(err, ErrJobExists) {
		t.Fatalf("duplicate AddJob: %v, want ErrJobExists", err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-n.Started()
	if err := n.TriggerLocal("solo-job"); err != nil {
		t.Fatal(err)
	}
	ev := l.next(t)
	if ev.res.Success != 4 || ev.res.Failure != 0 || ev.res.Err != nil {
		t.Fatalf("run result %+v, want 4 successes", ev.res)
	}
	if !slices.Equal(ev.info.Items, []int{0, 1, 2, 3}) || ev.info.Reason != ReasonTrigger || ev.info.ServerID != "solo" {
		t.Fatalf("run info %+v", ev.info)
	}
	if got := j.take(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("processed %v, want 0..3", got)
	}
	if got := n.Jobs(); !slices.Equal(got, []string{"solo-job"}) {
		t.Fatalf("Jobs = %v", got)
	}
	if err := n.TriggerLocal("nope"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("Trigger unknown: %v", err)
	}
	if err := n.RemoveJob(t.Context(), "solo-job"); err != nil {
		t.Fatal(err)
	}
	if len(n.Jobs()) != 0 {
		t.Fatalf("Jobs after remove = %v", n.Jobs())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hookErrs) != 0 {
		t.Fatalf("OnError got %v", hookErrs)
	}
}

func TestNodeAddJobValidates(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "v"})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	err = AddJob(t.Context(), n, JobConfig{JobName: "bad", ShardingTotalCount: 0}, Job[int](&itemJob{}))
	if !errors.Is(err, jobconfig.ErrInvalid) {
		t.Fatalf("AddJob with ShardingTotalCount 0: %v, want jobconfig.ErrInvalid", err)
	}
	err = AddJob(t.Context(), n, JobConfig{JobName: "badcron", ShardingTotalCount: 1, Cron: "every tuesday"}, Job[int](&itemJob{}))
	if err == nil {
		t.Fatal("AddJob with a bad cron succeeded")
	}
	if len(n.Jobs()) != 0 {
		t.Fatalf("failed adds left jobs: %v", n.Jobs())
	}
}

func TestNodeStopBeforeStartAndTwice(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "j", ShardingTotalCount: 1}, Job[int](&itemJob{})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(t.Context()); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "k", ShardingTotalCount: 1}, Job[int](&itemJob{})); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("AddJob after Stop: %v", err)
	}
}

// Start runs once (a second Start is a no-op, Started is closed), and after
// StopAndCancel a Stop or a second StopAndCancel returns nil and Start
// returns ErrNodeStopped.
func TestNodeStartTwiceAndStopAndCancelTwice(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.Started():
	default:
		t.Fatal("Started not closed after Start")
	}
	if err := n.StopAndCancel(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(t.Context()); err != nil {
		t.Fatalf("Stop after StopAndCancel: %v", err)
	}
	if err := n.StopAndCancel(t.Context()); err != nil {
		t.Fatalf("second StopAndCancel: %v", err)
	}
	if err := n.Start(t.Context()); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("Start after StopAndCancel: %v", err)
	}
}

func TestNodeErrorPolicyReturnReachesHook(t *testing.T) {
	errc := make(chan error, 4)
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "e", OnError: func(_ string, err error) { errc <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	l := newAfterListener()
	job := failingJob{}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "fails", ShardingTotalCount: 2, ErrorPolicy: ErrorPolicyReturn}, Job[int](job), WithListeners(l)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("fails"); err != nil {
		t.Fatal(err)
	}
	ev := l.next(t)
	if ev.res.Failure != 2 || !errors.Is(ev.res.Err, errBoom) {
		t.Fatalf("result %+v, want 2 failures and errBoom", ev.res)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, errBoom) {
			t.Fatalf("OnError got %v, want errBoom", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnError not called")
	}
}

type failingJob struct{}

func (failingJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }
func (failingJob) Process(context.Context, Shard, int) error       { return errBoom }

// cluster starts n Nodes on one memstore server, each with its own session.
func cluster(t *testing.T, srv *memstore.Server, ns string, count int) ([]*Node, []*memstore.Session) {
	t.Helper()
	return clusterWith(t, srv, ns, count, nil)
}

// clusterWith is cluster with the nodes' protocol events on sig (nil: off).
func clusterWith(t *testing.T, srv *memstore.Server, ns string, count int, sig *testsignal.Coord) ([]*Node, []*memstore.Session) {
	t.Helper()
	var nodes []*Node
	var sessions []*memstore.Session
	for i := range count {
		sess := srv.Connect(memstore.WithSessionTimeout(2 * time.Second))
		t.Cleanup(func() { _ = sess.Close() })
		n, err := NewNode(NodeConfig{Store: sess, Namespace: ns, ServerID: fmt.Sprintf("server-%d", i), testSignals: sig})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		sessions = append(sessions, sess)
	}
	return nodes, sessions
}

func TestNodeClusterShardsDisjointAndFailsOverOnStop(t *testing.T) {
	srv := memstore.NewServer()
	nodes, _ := cluster(t, srv, "cluster", 3)
	const total = 9
	jobs := make([]*itemJob, 3)
	ls := make([]*afterListener, 3)
	for i, n := range nodes {
		jobs[i], ls[i] = &itemJob{}, newAfterListener()
		if err := AddJob(t.Context(), n, JobConfig{JobName: "shared", ShardingTotalCount: total}, Job[int](jobs[i]), WithListeners(ls[i])); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make([]bool, 3)
	defer func() {
		for i, n := range nodes {
			if !stopped[i] {
				stopNode(t, n)
			}
		}
	}()

	runAll := func(live []int) map[int][]int {
		t.Helper()
		for _, i := range live {
			if err := nodes[i].TriggerLocal("shared"); err != nil {
				t.Fatal(err)
			}
		}
		got := map[int][]int{}
		for _, i := range live {
			ev := ls[i].next(t)
			if ev.res.Err != nil {
				t.Fatalf("server %d run error: %v", i, ev.res.Err)
			}
			got[i] = jobs[i].take()
			if !slices.Equal(got[i], slices.Sorted(slices.Values(ev.info.Items))) {
				t.Fatalf("server %d processed %v but was assigned %v", i, got[i], ev.info.Items)
			}
		}
		return got
	}
	want := make([]int, total)
	for i := range want {
		want[i] = i
	}
	// union returns the items of all servers, sorted, with repeats.
	union := func(got map[int][]int) []int {
		var all []int
		for _, items := range got {
			all = append(all, items...)
		}
		slices.Sort(all)
		return all
	}
	checkPartition := func(got map[int][]int) {
		t.Helper()
		if all := union(got); !slices.Equal(all, want) {
			t.Fatalf("items per server %v: union %v, want each of 0..%d exactly once", got, all, total-1)
		}
	}

	got := runAll([]int{0, 1, 2})
	checkPartition(got)
	for i := range 3 {
		if len(got[i]) != 3 {
			t.Fatalf("average sharding of 9 items over 3 servers: %v", got)
		}
	}

	stopNode(t, nodes[2])
	stopped[2] = true
	// The survivors take over server-2's items lazily, at a trigger: the
	// leader reshards in its Begin; a non-leader whose Begin sees the
	// resharding flag waits for the leader's next run (as in ElasticJob,
	// where every server fires on the same cron). So keep triggering both
	// survivors, as a cron would, until their latest runs own each of the
	// 9 items exactly once; bounded by a deadline.
	latest := map[int][]int{}
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, i := range []int{0, 1} {
			if err := nodes[i].TriggerLocal("shared"); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range []int{0, 1} {
			select {
			case ev := <-ls[i].runs:
				if ev.res.Err != nil {
					t.Fatalf("server %d run error: %v", i, ev.res.Err)
				}
				latest[i] = slices.Sorted(slices.Values(ev.info.Items))
			case <-time.After(time.Second):
			}
		}
		if slices.Equal(union(latest), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after a server stopped the survivors' latest runs own %v, want each of 0..%d once", latest, total-1)
		}
	}
}

func TestNodeLostSessionCancelsRun(t *testing.T) {
	srv := memstore.NewServer()
	nodes, sessions := cluster(t, srv, "lost", 1)
	n := nodes[0]
	defer stopNode(t, n)
	j := startBlockingRun(t, n)
	sessions[0].Expire()
	select {
	case err := <-j.unblock:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run ctx ended with %v, want Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lost session did not cancel the run's context")
	}
}

// startBlockingRun adds the one-item job "blocking" to n, starts n,
// triggers the job and returns once its item blocks (itemJob.block).
func startBlockingRun(t *testing.T, n *Node) *itemJob {
	t.Helper()
	j := &itemJob{block: true, blocked: make(chan struct{}, 4), unblock: make(chan error, 4)}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "blocking", ShardingTotalCount: 1}, Job[int](j)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("blocking"); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, 20*time.Second, "the blocking run to start", j.blocked)
	return j
}

func TestNodeReactsToOperator(t *testing.T) {
	srv := memstore.NewServer()
	nodes, _ := cluster(t, srv, "ops", 1)
	n := nodes[0]
	defer stopNode(t, n)
	adminSess := srv.Connect()
	defer adminSess.Close()
	admin := coord.NewAdmin(adminSess, "ops")

	l := newAfterListener()
	if err := AddJob(t.Context(), n, JobConfig{JobName: "opjob", ShardingTotalCount: 2}, Job[int](&itemJob{}), WithListeners(l)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}

	// An operator's trigger runs the job on this server.
	if err := admin.Trigger(t.Context(), "opjob"); err != nil {
		t.Fatal(err)
	}
	if ev := l.next(t); ev.info.Reason != ReasonTrigger || ev.res.Success != 2 {
		t.Fatalf("operator trigger ran %+v", ev)
	}

	// A live cron edit reschedules the job.
	if !n.NextFireTime("opjob").IsZero() {
		t.Fatal("trigger-only job has a next fire time")
	}
	if err := admin.SetConfig(t.Context(), "opjob", jobconfig.FieldCron, "0 0 0 1 1 ?"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the new cron is scheduled", func() bool { return !n.NextFireTime("opjob").IsZero() })
	if next := n.NextFireTime("opjob"); next.Month() != time.January || next.Day() != 1 {
		t.Fatalf("next fire %v, want January 1st", next)
	}

	// An operator's shutdown stops the job on this server.
	if err := admin.Shutdown(t.Context(), "opjob", ""); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the shut down job leaves the node", func() bool { return len(n.Jobs()) == 0 })
	if err := n.TriggerLocal("opjob"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("Trigger after shutdown: %v, want ErrNoJob", err)
	}
}

func TestNodeOnceListenersRunOncePerRun(t *testing.T) {
	srv := memstore.NewServer()
	sig := testsignal.NewCoord()
	nodes, _ := clusterWith(t, srv, "once", 3, sig)
	var mu sync.Mutex
	calls := map[string]int{}
	once := OnceListener{
		BeforeAll: func(context.Context) error {
			mu.Lock()
			calls["before"]++
			mu.Unlock()
			return nil
		},
		AfterAll: func(context.Context) error {
			mu.Lock()
			calls["after"]++
			mu.Unlock()
			return nil
		},
		StartedTimeout: 10 * time.Second, CompletedTimeout: 10 * time.Second,
	}
	ls := make([]*afterListener, 3)
	for i, n := range nodes {
		ls[i] = newAfterListener()
		if err := AddJob(t.Context(), n, JobConfig{JobName: "oncejob", ShardingTotalCount: 6}, Job[int](&itemJob{}), WithListeners(ls[i]), WithOnceListeners(once)); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer stopNode(t, n)
	}
	// The claim is exactly once per run, not behaviour during membership
	// churn: let the joins' resharding settle before the first round.
	waitSettled(t, srv, sig, "once", "oncejob", 3)
	for round := 1; round <= 2; round++ {
		for _, n := range nodes {
			if err := n.TriggerLocal("oncejob"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range nodes {
			if ev := ls[i].next(t); ev.res.Err != nil {
				t.Fatalf("round %d server %d: %v", round, i, ev.res.Err)
			}
		}
		mu.Lock()
		b, a := calls["before"], calls["after"]
		mu.Unlock()
		if b != round || a != round {
			t.Fatalf("after round %d: BeforeAll ran %d times, AfterAll %d, want %d each", round, b, a, round)
		}
	}
}

type batchSum struct{}

func (batchSum) Fetch(_ context.Context, s Shard) ([]int, error) {
	out := make([]int, s.FetchCount)
	for i := range out {
		out[i] = i
	}
	return out, nil
}

// ProcessBatch fails the odd values of each slice.
func (batchSum) ProcessBatch(_ context.Context, _ Shard, vs []int) (int, error) {
	ok := 0
	for _, v := range vs {
		if v%2 == 0 {
			ok++
		}
	}
	return ok, nil
}

func TestNodeBatchJobAndLocalMisfire(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	l := newAfterListener()
	cfg := JobConfig{JobName: "batch", ShardingTotalCount: 3, FetchDataCount: 10, ConcurrentDataProcessThreadCount: 3}
	if err := AddBatchJob(t.Context(), n, cfg, BatchJob[int](batchSum{}), WithListeners(l)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("batch"); err != nil {
		t.Fatal(err)
	}
	if ev := l.next(t); ev.res.Success != 15 || ev.res.Failure != 15 {
		t.Fatalf("batch run %+v, want 15 successes and 15 failures", ev.res)
	}

	// Cron fires while a run is in progress: one catch-up run after it.
	gl := fireDuringRun(t, n, 3)
	if ev := gl.next(t); ev.info.Reason != ReasonCron {
		t.Fatalf("first run reason %v", ev.info.Reason)
	}
	if ev := gl.next(t); ev.info.Reason != ReasonMisfire || ev.res.Success != 1 {
		t.Fatalf("catch-up run %+v, want one misfire run", ev)
	}
	select {
	case ev := <-gl.runs:
		t.Fatalf("a third run %+v: missed fires must collapse into one", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// fireDuringRun adds the one-item job "slow" to n, fires its cron, and
// fires it extra more times during that run: the catch-up after the run
// is a misfire run. It returns the job's listener, both runs to come.
func fireDuringRun(t *testing.T, n *Node, extra int) *afterListener {
	t.Helper()
	gate := &gateJob{started: make(chan struct{}, 4), release: make(chan struct{})}
	gl := newAfterListener()
	if err := AddJob(t.Context(), n, JobConfig{JobName: "slow", ShardingTotalCount: 1}, Job[int](gate), WithListeners(gl)); err != nil {
		t.Fatal(err)
	}
	n.sched.mu.Lock()
	sj := n.sched.jobs["slow"]
	n.sched.mu.Unlock()
	n.sched.fire(time.Time{}, sj) // the cron callback
	<-gate.started
	for range extra {
		n.sched.fire(time.Time{}, sj)
	}
	close(gate.release)
	return gl
}

// gateJob's Process blocks until release is closed.
type gateJob struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }

func (g *gateJob) Process(ctx context.Context, _ Shard, _ int) error {
	g.started <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A run still waiting in Begin (here: a non-leader waiting for the leader
// to reshard) has started nothing, so a graceful Stop ends the wait at once
// instead of waiting for the leader or for Stop's deadline.
func TestNodeGracefulStopEndsWaitInBegin(t *testing.T) {
	// A bubble: Stop's duration and "no run within 300 ms" are read on the
	// fake clock, which moves only when every goroutine waits: a loaded
	// machine cannot make a prompt Stop look slow, and server-1's run is
	// surely waiting in Begin when Stop comes.
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		nodes, _ := cluster(t, srv, "wait", 2)
		// server-0 (the leader: it joined first) blocks in Process until its run
		// is cancelled; server-1 would process at once.
		jobs := []*perServerJob{{block: true, started: make(chan int, 8)}, {started: make(chan int, 8)}}
		ls := make([]*afterListener, 2)
		for i, n := range nodes {
			ls[i] = newAfterListener()
			if err := AddJob(t.Context(), n, JobConfig{JobName: "w", ShardingTotalCount: 4}, Job[int](jobs[i]), WithListeners(ls[i])); err != nil {
				t.Fatal(err)
			}
			if err := n.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := nodes[0].StopAndCancel(ctx); err != nil {
				t.Errorf("StopAndCancel of the leader: %v", err)
			}
		}()
		// The leader starts a run that stays in progress.
		if err := nodes[0].TriggerLocal("w"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-jobs[0].started:
		case <-time.After(10 * time.Second):
			t.Fatal("the leader's run never started")
		}
		// A new total raises the resharding flag; the leader may not reshard
		// while its items run, so the flag stays up.
		adminSession := srv.Connect()
		defer adminSession.Close()
		admin := coord.NewAdmin(adminSession, "wait")
		if err := admin.SetConfig(t.Context(), "w", "shardingTotalCount", "6"); err != nil {
			t.Fatal(err)
		}
		// server-1's run waits in Begin for the reshard.
		if err := nodes[1].TriggerLocal("w"); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-ls[1].runs:
			t.Fatalf("server-1 ran %+v while resharding was pending", ev)
		case <-time.After(300 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := nodes[1].Stop(ctx); err != nil {
			t.Fatalf("graceful Stop with a run waiting in Begin: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Stop took %v, want the wait in Begin ended at once", d)
		}
		select {
		case ev := <-ls[1].runs:
			t.Fatalf("a run that never began reached listeners: %+v", ev)
		default:
		}
	})
}

// perServerJob blocks Process on the servers listed in block until their
// run context ends; other servers process at once.
type perServerJob struct {
	block    bool
	started  chan int
	failover atomic.Bool // a Shard with Failover set was processed
}

func (p *perServerJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }

func (p *perServerJob) Process(ctx context.Context, s Shard, v int) error {
	if s.Failover {
		p.failover.Store(true)
	}
	if p.block {
		p.started <- v
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// A server crashes (its session closes) while its item runs: with failover
// on, the idle survivor is signalled, claims the item and runs it at once,
// with Shard.Failover set, without waiting for a trigger. Either server may
// crash: the leader (server-0, which joined first) or the other one.
func TestNodeFailoverToIdleServer(t *testing.T) {
	for _, crash := range []int{0, 1} {
		t.Run(fmt.Sprintf("server-%d crashes", crash), func(t *testing.T) {
			survivor := 1 - crash
			srv := memstore.NewServer()
			nodes, sessions := cluster(t, srv, "fo", 2)
			jobs := []*perServerJob{{started: make(chan int, 4)}, {started: make(chan int, 4)}}
			ls := []*afterListener{newAfterListener(), newAfterListener()}
			mems := []*history.Memory{history.NewMemory(0), history.NewMemory(0)}
			for i, n := range nodes {
				n.cfg.History = mems[i] // set before Start, read only by runs
				cfg := JobConfig{JobName: "fo", ShardingTotalCount: 2, Failover: true}
				if err := AddJob(t.Context(), n, cfg, Job[int](jobs[i]), WithListeners(ls[i])); err != nil {
					t.Fatal(err)
				}
				if err := n.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				defer stopNode(t, n)
			}
			// First round: the leader reshards, each server owns one item.
			for _, n := range nodes {
				if err := n.TriggerLocal("fo"); err != nil {
					t.Fatal(err)
				}
			}
			owned := map[int]int{}
			for i := range nodes {
				ev := ls[i].next(t)
				if len(ev.info.Items) != 1 {
					t.Fatalf("server %d ran items %v, want one of two", i, ev.info.Items)
				}
				owned[i] = ev.info.Items[0]
			}

			// The crashing server runs its item and hangs in it; then its
			// session ends, as when its process dies.
			jobs[crash].block = true
			if err := nodes[crash].TriggerLocal("fo"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-jobs[crash].started:
			case <-time.After(20 * time.Second):
				t.Fatal("the crashing server's run did not start")
			}
			if err := sessions[crash].Close(); err != nil {
				t.Fatal(err)
			}

			// The survivor, idle, takes the item over on its own.
			for {
				ev := ls[survivor].next(t)
				if ev.info.Reason != ReasonFailover {
					continue // a run started by something else; keep waiting
				}
				if !slices.Equal(ev.info.Items, []int{owned[crash]}) || ev.res.Success != 1 {
					t.Fatalf("failover run %+v, want the crashed server's item %d processed", ev, owned[crash])
				}
				break
			}
			if !jobs[survivor].failover.Load() {
				t.Fatal("the failover run's Shard did not have Failover set")
			}
			fo, _ := mems[survivor].Runs(t.Context(), history.Filter{Item: &[]int{owned[crash]}[0]})
			if len(fo) == 0 || fo[0].Source != history.SourceFailover || fo[0].Success != 1 || fo[0].Server != fmt.Sprintf("server-%d", survivor) {
				t.Fatalf("survivor's newest record of item %d: %+v; want a failover run with 1 success", owned[crash], fo)
			}
		})
	}
}

// failSome fails item 2's value and succeeds the others.
type failSome struct{}

func (failSome) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }
func (failSome) Process(_ context.Context, _ Shard, v int) error {
	if v == 2 {
		return errBoom
	}
	return nil
}

// Counts reach Prometheus through NodeConfig.Metrics, and the coordination
// store through the job's reporter (flushed when the job is removed).
func TestNodeStatsAndMetrics(t *testing.T) {
	srv := memstore.NewServer()
	sess := srv.Connect()
	defer sess.Close()
	metrics := prometheus.NewRegistry()
	n, l := startNodeWithJob(t, NodeConfig{Store: sess, Namespace: "stats", ServerID: "server-0", Metrics: metrics},
		JobConfig{JobName: "m", ShardingTotalCount: 3, ErrorPolicy: ErrorPolicyIgnore}, failSome{})
	defer stopNode(t, n)
	if err := n.TriggerLocal("m"); err != nil {
		t.Fatal(err)
	}
	if ev := l.next(t); ev.res.Success != 2 || ev.res.Failure != 1 || ev.res.Err != nil {
		t.Fatalf("run %+v, want 2 successes, 1 failure, no error (policy ignore)", ev.res)
	}
	// ObserveRun comes after AfterRun: poll the runs counter.
	want := `
# HELP shardflow_items_processed_total Items processed by dataflow jobs on this server, by outcome.
# TYPE shardflow_items_processed_total counter
shardflow_items_processed_total{job="m",result="failure",server="server-0"} 1
shardflow_items_processed_total{job="m",result="success",server="server-0"} 2
# HELP shardflow_runs_total Runs of dataflow jobs on this server, by outcome (failure: the run returned an error).
# TYPE shardflow_runs_total counter
shardflow_runs_total{job="m",result="failure",server="server-0"} 0
shardflow_runs_total{job="m",result="success",server="server-0"} 1
`
	want += `
# HELP shardflow_item_consecutive_failed_runs Runs of the shard item in a row on this server, up to its last, that ended in an error; 0 once one did not. Alert when it reaches N.
# TYPE shardflow_item_consecutive_failed_runs gauge
shardflow_item_consecutive_failed_runs{item="0",job="m",server="server-0"} 0
shardflow_item_consecutive_failed_runs{item="1",job="m",server="server-0"} 0
shardflow_item_consecutive_failed_runs{item="2",job="m",server="server-0"} 1
# HELP shardflow_item_run_errors_total Runs of the shard item on this server that ended in an error (a failed fetch or commit, a timeout, a panic, a lost connection).
# TYPE shardflow_item_run_errors_total counter
shardflow_item_run_errors_total{item="0",job="m",server="server-0"} 0
shardflow_item_run_errors_total{item="1",job="m",server="server-0"} 0
shardflow_item_run_errors_total{item="2",job="m",server="server-0"} 1
`
	testwait.ForNoError(t, 30*time.Second, "metrics show the run", func() error {
		return testutil.GatherAndCompare(metrics, strings.NewReader(want), "shardflow_items_processed_total", "shardflow_runs_total",
			"shardflow_item_consecutive_failed_runs", "shardflow_item_run_errors_total")
	})
	// Status has the counts and the failing item as soon as the run has
	// completed (its Complete wrote them), not a report interval later.
	st, err := coord.NewAdmin(sess, "stats").Status(t.Context(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Servers[0]; s.TotalSuccessCount != 2 || s.TotalFailureCount != 1 || s.CountsAsOf == nil {
		t.Fatalf("server after the run %+v, want totals 2/1 with their time", s)
	}
	if it := st.Items[2]; it.ConsecutiveFailures != 1 || !strings.Contains(it.LastError, errBoom.Error()) || st.Health != coord.HealthFailing {
		t.Fatalf("item 2 after its failed run %+v (health %s), want failing once with %v", it, st.Health, errBoom)
	}

	if err := n.RemoveJob(t.Context(), "m"); err != nil {
		t.Fatal(err)
	}
	st, err = coord.NewAdmin(sess, "stats").Status(t.Context(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 1 || st.Servers[0].ProcessSuccessCount != 2 || st.Servers[0].ProcessFailureCount != 1 {
		t.Fatalf("servers in status %+v, want server-0 with counts 2/1", st.Servers)
	}
}

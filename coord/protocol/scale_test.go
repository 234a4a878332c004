package protocol_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/storecount"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestScaleZooKeeper is the large-job measurement behind `make
// bench-scale`: SHARDFLOW_SCALE_ITEMS items (10,000 there) over 3 servers
// on real ZooKeeper, two in the test process and the third a real process
// (coord/internal/scaleworker). It reshards, runs every item (Begin and
// Complete split below the request limit), reads the status, SIGKILLs the
// worker process mid-run, waits for its items to be queued for failover,
// claims and runs one of them, and lets the survivors take the rest over
// by resharding. It logs the time of each step and the requests per
// server of a steady-state trigger; it asserts only outcomes (every item
// in one run, every item completed, the killed server's items queued).
// Skipped unless SHARDFLOW_SCALE_ITEMS is set.
func TestScaleZooKeeper(t *testing.T) {
	n := scaleItems(t)
	zk := integration.SharedZooKeeper(t)
	b := coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0]})
	root := b.(interface{ Root() string }).Root()
	runScale(t, b, n, "zk", []string{"--zk", zk.Servers()[0], "--root", root,
		"--session-timeout", coordtest.DefaultZooKeeperSessionTimeout.String()})
}

// TestScalePostgres is TestScaleZooKeeper on coord/pgstore (one Postgres
// container, the sessions' timeout ZooKeeper's, pgstore's default pool):
// `make bench-scale STORE=pg`, or STORE=zk,pg for both side by side in one
// run. Skipped unless SHARDFLOW_SCALE_ITEMS is set.
func TestScalePostgres(t *testing.T) {
	n := scaleItems(t)
	pg := integration.SharedPostgres(t)
	b := coordtest.Postgres(t, coordtest.PostgresConfig{DSN: pg.DSN(), SessionTimeout: coordtest.DefaultZooKeeperSessionTimeout,
		MaxConns: pgstore.DefaultMaxConns})
	schema := b.(interface{ Schema() string }).Schema()
	runScale(t, b, n, "pg", []string{"--coord", pg.DSN(), "--schema", schema,
		"--session-timeout", coordtest.DefaultZooKeeperSessionTimeout.String()})
}

// scaleItems is SHARDFLOW_SCALE_ITEMS; it skips t when unset.
func scaleItems(t *testing.T) int {
	n, _ := strconv.Atoi(os.Getenv("SHARDFLOW_SCALE_ITEMS"))
	if n <= 0 {
		t.Skip("set SHARDFLOW_SCALE_ITEMS (make bench-scale) to run the scale measurement")
	}
	return n
}

// runScale is the measurement on backend b; store names it in the SCALE
// lines, storeArgs connect the scaleworker process to b's tree.
func runScale(t *testing.T, b coordtest.Backend, n int, storeName string, storeArgs []string) {
	bin := integration.BuildBinary(t, "github.com/shardflow/shardflow/coord/internal/scaleworker")
	h := coordtest.NewHarness(t, b)
	cfg := coordtest.Config("scale", n, func(c *jobconfig.Config) { c.Failover = true })
	const inProcess = 2
	cs := make([]*storecount.Store, inProcess)
	srv := make([]*coordtest.Server, inProcess)
	for i := range inProcess {
		cs[i] = storecount.New(b.Connect(t))
		s, err := h.TryStart(fmt.Sprintf("s%d", i), cfg, cs[i])
		if err != nil {
			t.Fatal(err)
		}
		srv[i] = s
	}
	// s2 joins last (s0 leads), on its own session, straight to the server.
	w := &worker{p: integration.StartProcess(t, bin, append(storeArgs,
		"--namespace", h.NS, "--job", "scale", "--server-id", "s2", "--total", strconv.Itoa(n)), nil)}
	w.p.RequireLine(t, "^ready$", 2*time.Minute)

	step := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		t.Logf("SCALE store=%s items=%d %s: %.3f s", storeName, n, what, time.Since(start).Seconds())
	}
	var runs []*protocol.Run
	var wr workerLine
	step("first trigger: reshard + Begin on 3 servers", func() { runs, wr = beginWith(t, w, srv...) })
	if got := len(runs[0].Shards()) + len(runs[1].Shards()) + wr.items; got != n {
		t.Fatalf("first trigger: %d items over the 3 servers, want %d", got, n)
	}
	step("first Complete on 3 servers", func() { completeWith(t, w, runs...) })

	before := make([]storecount.Counts, inProcess)
	for i := range inProcess {
		before[i] = cs[i].Counts()
	}
	wBefore := w.last
	step("steady trigger: Begin on 3 servers", func() { runs, _ = beginWith(t, w, srv...) })
	step("steady Complete on 3 servers", func() { completeWith(t, w, runs...) })
	for i := range inProcess {
		d := cs[i].Counts().Sub(before[i])
		t.Logf("SCALE store=%s items=%d server s%d steady trigger: %d write requests (%d ops), %d reads", storeName, n, i, d.Writes, d.MultiOps, d.Reads)
	}
	t.Logf("SCALE store=%s items=%d server s2 (process) steady trigger: %d write requests (%d ops), %d reads", storeName, n,
		w.last.writes-wBefore.writes, w.last.ops-wBefore.ops, w.last.reads-wBefore.reads)

	ctx := context.Background()
	var st coord.JobStatus
	// The status is read through a counting store: its requests are
	// logged beside its time.
	statusSt := storecount.New(b.Connect(t))
	admin := coord.NewAdmin(statusSt, h.NS)
	readStatus := func(what string) coord.JobStatus {
		before := statusSt.Counts()
		var js coord.JobStatus
		step(what, func() {
			var err error
			if js, err = admin.Status(ctx, "scale"); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("SCALE store=%s items=%d %s: %d requests", storeName, n, what, statusSt.Counts().Sub(before).Reads)
		// One read's wall time at load 20-30 moves 10x with the scheduler
		// and ZooKeeper's own waits: the spread of a few more, and the
		// process's CPU per read, say whether the read itself got slower
		// (BenchmarkStatusAtRest in coord measures its CPU alone).
		med, lo, hi, cpu := timeStatusReads(t, admin, statusRepeats)
		t.Logf("SCALE store=%s items=%d %s, %d reads more: median %.3f s, min %.3f s, max %.3f s; test process CPU %.3f s per read",
			storeName, n, what, statusRepeats, med.Seconds(), lo.Seconds(), hi.Seconds(), cpu.Seconds())
		// The times it took from the run records are the items' own.
		if err := coordtest.CheckItemTimes(ctx, h.AdminStore, h.NS, "scale", js); err != nil {
			t.Fatal(err)
		}
		return js
	}
	st = readStatus("status")
	completed := 0
	for _, it := range st.Items {
		if it.Completed {
			completed++
		}
	}
	if len(st.Items) != n || completed != n {
		t.Fatalf("status: %d items, %d completed; want %d and %d", len(st.Items), completed, n, n)
	}

	// s2 is SIGKILLed mid-run: its connection drops, and the store expires
	// its session after the timeout.
	watch := b.Connect(t)
	runs, wr = beginWith(t, w, srv...)
	victim := wr.items
	start := time.Now()
	if err := w.p.Kill(); err != nil {
		t.Fatal(err)
	}
	// The queue is watched with one listing per poll (a status read of
	// this job takes longer than the queueing), before the survivors
	// complete their runs, which the queueing does not wait for.
	queue := store.Join(h.NS, "scale", "leader", "failover", "items")
	testwait.For(t, 2*time.Minute, "the killed server's items queued for failover", func() bool {
		q, _, err := watch.Children(ctx, queue)
		return err == nil && len(q) == victim
	})
	t.Logf("SCALE store=%s items=%d SIGKILL -> %d items queued for failover: %.3f s", storeName, n, victim, time.Since(start).Seconds())
	completeAll(t, runs...)
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
	step("survivors take over by resharding: Begin on 2 servers", func() { runs = beginAll(t, srv...) })
	coordtest.AssertPartition(t, n, runs...)
	completeAll(t, runs...)
	readStatus("status after the takeover")
}

// statusRepeats is how many more status reads each status step times.
const statusRepeats = 5

// timeStatusReads reads job "scale"'s status k times through admin and
// returns the median, lowest and highest wall time and this process's CPU
// time per read (its servers' work meanwhile included: at rest they make
// no requests).
func timeStatusReads(t *testing.T, admin *coord.Admin, k int) (med, lo, hi, cpu time.Duration) {
	t.Helper()
	ctx := context.Background()
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	times := make([]time.Duration, k)
	for i := range times {
		start := time.Now()
		if _, err := admin.Status(ctx, "scale"); err != nil {
			t.Fatal(err)
		}
		times[i] = time.Since(start)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	used := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	slices.Sort(times)
	return times[k/2], times[0], times[k-1], time.Duration(used / int64(k))
}

// worker drives the scaleworker process: each step is a SIGUSR1 and the
// line the worker prints for it.
type worker struct {
	p    *integration.Process
	n    int        // steps sent
	last workerLine // the latest line's counters
}

// workerLine is a parsed "begun" or "completed" line: items owned (begun
// only) and the worker's cumulative request counters.
type workerLine struct {
	items              int
	writes, ops, reads int64
}

// step sends the next SIGUSR1 and waits for its line (what: "begun" or
// "completed"); an "error:" line or an exit fails the test.
func (w *worker) step(t *testing.T, what string) (workerLine, error) {
	w.n++
	if err := syscall.Kill(w.p.Pid(), syscall.SIGUSR1); err != nil {
		return workerLine{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	re := regexp.MustCompile(fmt.Sprintf(`^(%s %d |error: )`, what, w.n))
	line, err := w.p.WaitForLine(ctx, re)
	if err != nil {
		return workerLine{}, fmt.Errorf("worker step %d (%s): %w", w.n, what, err)
	}
	if strings.HasPrefix(line, "error: ") {
		return workerLine{}, fmt.Errorf("worker step %d (%s): %s", w.n, what, line)
	}
	var l workerLine
	var step int
	if what == "begun" {
		_, err = fmt.Sscanf(line, "begun %d items=%d writes=%d ops=%d reads=%d", &step, &l.items, &l.writes, &l.ops, &l.reads)
	} else {
		_, err = fmt.Sscanf(line, "completed %d writes=%d ops=%d reads=%d", &step, &l.writes, &l.ops, &l.reads)
	}
	if err != nil {
		return workerLine{}, fmt.Errorf("worker line %q: %w", line, err)
	}
	w.last = l
	return l, nil
}

// beginWith begins a run on the worker and on servers at once.
func beginWith(t *testing.T, w *worker, servers ...*coordtest.Server) ([]*protocol.Run, workerLine) {
	t.Helper()
	var l workerLine
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err = w.step(t, "begun")
	}()
	runs := beginAll(t, servers...)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	return runs, l
}

// completeWith completes the worker's run and runs.
func completeWith(t *testing.T, w *worker, runs ...*protocol.Run) {
	t.Helper()
	if _, err := w.step(t, "completed"); err != nil {
		t.Fatal(err)
	}
	completeAll(t, runs...)
}

// beginAll is coordtest.BeginAll with a context long enough for a first
// trigger of thousands of items (each item's nodes read once when the item
// becomes the server's).
func beginAll(t *testing.T, servers ...*coordtest.Server) []*protocol.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	runs := make([]*protocol.Run, len(servers))
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
func completeAll(t *testing.T, runs ...*protocol.Run) {
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

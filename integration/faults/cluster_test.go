package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/internal/testwait"
)

// sessionTimeout is the workers' ZooKeeper session timeout: the smallest a
// server with tickTime 500ms grants is 1s; 2s leaves room for a loaded
// machine's scheduling hiccups without false expiries.
const sessionTimeout = 2 * time.Second

// cluster is one job shared by worker processes in one namespace of one
// ZooKeeper (server or ensemble). Every worker's events go into one log.
type cluster struct {
	t         testing.TB
	zk        []string // addresses the test's own session uses
	coord     string   // a postgres:// URL instead of zk: workers and the test's session on coord/pgstore
	namespace string
	job       string
	total     int
	baseArgs  []string
	log       *eventLog
	dir       string // workers' stderr files; removed after close has shown them

	mu      sync.Mutex
	workers map[string]*worker

	st    store.Store
	admin *coord.Admin
}

// newCluster prepares a job named after the test in its own namespace on
// zk. baseArgs are given to every worker (after the connection flags).
// Nothing is started yet.
func newCluster(t testing.TB, zk []string, total int, baseArgs ...string) *cluster {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	c := &cluster{
		t:         t,
		zk:        zk,
		namespace: "faults-" + name + fmt.Sprintf("-%d", time.Now().UnixNano()%1e6),
		job:       "tickjob",
		total:     total,
		baseArgs:  baseArgs,
		log:       newEventLog(),
		workers:   map[string]*worker{},
		// Created before close is registered, so removed after it ran.
		dir: t.TempDir(),
	}
	t.Cleanup(c.close)
	return c
}

// session returns the test's own ZooKeeper session and an Admin over the
// namespace, opening them on first use.
func (c *cluster) session() (store.Store, *coord.Admin) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var st store.Store
		var err error
		if c.coord != "" {
			st, err = connect.Open(ctx, connect.Config{Coord: c.coord, SessionTimeout: 10 * time.Second, ConnectTimeout: 60 * time.Second})
		} else {
			st, err = zkstore.Open(ctx, zkstore.Config{Servers: c.zk, SessionTimeout: 10 * time.Second, ConnectTimeout: 60 * time.Second})
		}
		if err != nil {
			c.t.Fatalf("faults: open the test's session on %v%s: %v", c.zk, c.coord, err)
		}
		c.st = st
		c.admin = coord.NewAdmin(st, c.namespace)
	}
	return c.st, c.admin
}

// status reads the job's status through coord.Admin, retrying transient
// store errors (ZooKeeper restarting) until timeout.
func (c *cluster) status(timeout time.Duration) coord.JobStatus {
	c.t.Helper()
	_, admin := c.session()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var st coord.JobStatus
	err := testwait.Poll(ctx, func(ctx context.Context) (err error) {
		st, err = admin.Status(ctx, c.job)
		return err
	})
	if err != nil {
		c.t.Fatalf("faults: status of job %s in namespace %s: %v", c.job, c.namespace, err)
	}
	return st
}

// awaitStatus polls status until cond returns nil or timeout passes, then
// fails the test with cond's last error and the status.
func (c *cluster) awaitStatus(timeout time.Duration, what string, cond func(coord.JobStatus) error) coord.JobStatus {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var st coord.JobStatus
	err := testwait.Poll(ctx, func(context.Context) error {
		st = c.status(timeout)
		return cond(st)
	})
	if err != nil {
		c.t.Fatalf("faults: waited %v for %s: %v\nstatus: %s\nlast events:\n%s", timeout, what, err, describeStatus(st), tail(c.log.all(), 30))
	}
	return st
}

// requireOwnership waits until the live servers are exactly want and their
// sharding covers 0..total-1 disjointly.
func (c *cluster) requireOwnership(timeout time.Duration, want ...string) coord.JobStatus {
	c.t.Helper()
	return c.awaitStatus(timeout, fmt.Sprintf("disjoint ownership by %v", want), func(st coord.JobStatus) error {
		if got := liveServers(st); strings.Join(got, ",") != strings.Join(sorted(want), ",") {
			return fmt.Errorf("live servers %v, want %v", got, sorted(want))
		}
		if st.ReshardingPending {
			return errors.New("resharding still pending")
		}
		for _, s := range st.Servers {
			if s.Status != "OFFLINE" && !s.Disabled && len(s.Sharding) == 0 && c.total >= len(want) {
				return fmt.Errorf("server %s owns nothing yet", s.ID)
			}
		}
		return checkDisjointOwnership(st, c.total)
	})
}

// start launches a worker with the cluster's flags, args appended, and waits
// for its "ready" event.
func (c *cluster) start(id string, args ...string) *worker {
	c.t.Helper()
	return c.startVia(id, c.zk, args...)
}

// startVia is start with the worker connecting to zk instead of the
// cluster's servers (a proxy in front of them).
func (c *cluster) startVia(id string, zk []string, args ...string) *worker {
	c.t.Helper()
	conn := []string{"--zk", strings.Join(zk, ",")}
	if c.coord != "" {
		conn = []string{"--coord", c.coord}
	}
	full := append(conn,
		"--namespace", c.namespace,
		"--job", c.job,
		"--server-id", id,
		"--total", fmt.Sprint(c.total),
		"--session-timeout", sessionTimeout.String())
	full = append(full, c.baseArgs...)
	full = append(full, args...)
	w := startWorker(c.t, workerBinary(c.t), c.dir, id, full, c.log)
	c.mu.Lock()
	c.workers[id] = w
	c.mu.Unlock()
	since := w.started
	c.log.waitFor(c.t, 60*time.Second, "worker "+id+" ready", func(evs []Event) bool {
		for _, e := range evs {
			if e.Server == id && e.Ev == "ready" && !e.Time().Before(since.Truncate(time.Millisecond)) {
				return true
			}
			if e.Server == id && e.Ev == "error" && !e.Time().Before(since.Truncate(time.Millisecond)) {
				c.t.Fatalf("faults: worker %s failed to start: %s\n%s", id, e.Err, w.stderrTail())
			}
		}
		if w.exited() {
			c.t.Fatalf("faults: worker %s exited before ready: %v\n%s", id, w.exitErr(), w.stderrTail())
		}
		return false
	})
	return w
}

// worker returns the last started worker with id.
func (c *cluster) worker(id string) *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[id]
}

// checkInvariants runs the end-of-test checks: no fencing check passed
// after a newer owner began the item (events), no stale commit accepted and
// no epoch shared by two servers (the ledger), every printed commit in the
// ledger, and disjoint ownership over exactly want. It returns the ledger.
func (c *cluster) checkInvariants(want ...string) map[int][]ledgerCommit {
	c.t.Helper()
	evs := c.log.all()
	if stale := staleCommits(evs); len(stale) > 0 {
		c.t.Errorf("faults: %d commits whose fencing check passed after a newer owner began:\n  %s", len(stale), strings.Join(stale, "\n  "))
	}
	ledger := c.readLedger(30 * time.Second)
	var accepted int
	for _, lcs := range ledger {
		accepted += len(lcs)
	}
	if accepted == 0 {
		c.t.Errorf("faults: the ledger of job %s holds no commit: nothing was audited", c.job)
	}
	if bad := ledgerViolations(ledger); len(bad) > 0 {
		c.t.Errorf("faults: %d ledger violations:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	if bad := unrecordedCommits(evs, ledger); len(bad) > 0 {
		c.t.Errorf("faults: commit events without an accepted ledger write:\n  %s", strings.Join(bad, "\n  "))
	}
	fenced := map[string]int{}
	for _, e := range evs {
		if e.Ev == "fenced" {
			fenced[e.Reason]++
		}
	}
	c.t.Logf("ledger: %d accepted commits over %d items; refused: %d by the ownership check, %d by the ledger's epoch", accepted, c.total, fenced["ownership"], fenced["ledger"])
	if len(want) > 0 {
		c.requireOwnership(30*time.Second, want...)
	}
	for _, e := range evs {
		if e.Ev == "error" {
			c.t.Logf("worker error event (not a failure by itself): %s", e)
		}
	}
	return ledger
}

// close stops every worker still running (SIGKILL: the test is over) and
// closes the test's session.
func (c *cluster) close() {
	c.mu.Lock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	st := c.st
	c.mu.Unlock()
	for _, w := range ws {
		w.kill()
		w.wait()
	}
	if c.t.Failed() {
		for _, w := range ws {
			c.t.Logf("stderr of worker %s:\n%s", w.id, w.stderrTail())
		}
	}
	if st != nil {
		_ = st.Close()
	}
}

func sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// worker is one testworker process. Its stdout is parsed into the cluster's
// event log by a reader goroutine that wait stops and waits for; its stderr
// goes to a file shown when the test fails.
type worker struct {
	id      string
	cmd     *exec.Cmd
	started time.Time
	errPath string

	readerDone chan struct{}
	waitOnce   sync.Once
	done       chan struct{} // closed when the process has been reaped
	err        error
}

func startWorker(t testing.TB, bin, dir, id string, args []string, log *eventLog) *worker {
	t.Helper()
	errFile, err := os.CreateTemp(dir, id+"-*.stderr")
	if err != nil {
		t.Fatalf("faults: create the stderr file of worker %s in %s: %v", id, dir, err)
	}
	errPath := errFile.Name()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = errFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("faults: stdout pipe of worker %s: %v", id, err)
	}
	w := &worker{id: id, cmd: cmd, errPath: errPath, readerDone: make(chan struct{}), done: make(chan struct{})}
	w.started = time.Now()
	if err := cmd.Start(); err != nil {
		errFile.Close()
		t.Fatalf("faults: start worker %s (%s): %v", id, bin, err)
	}
	errFile.Close() // the child holds its own descriptor
	go func() {
		defer close(w.readerDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e, err := parseEvent(sc.Bytes())
			if err != nil {
				e = Event{Ev: "garbage", Server: id, Err: err.Error(), T: time.Now().UnixMilli()}
			}
			if e.Server == "" {
				e.Server = id
			}
			log.add(e)
		}
	}()
	// Reap in the background so exited() is accurate; wait joins it.
	go func() {
		<-w.readerDone // Wait must follow the last read of the pipe
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() { w.kill(); w.wait() })
	return w
}

func (w *worker) signal(sig syscall.Signal) error {
	if w.exited() {
		return nil
	}
	return w.cmd.Process.Signal(sig)
}

// kill sends SIGKILL (a crash) and returns at once; the send time is the
// moment of the fault.
func (w *worker) kill() time.Time {
	at := time.Now()
	_ = w.signal(syscall.SIGKILL)
	return at
}

// term sends SIGTERM (a graceful stop) and waits for the exit, failing t
// when the worker does not exit cleanly within timeout.
func (w *worker) term(t testing.TB, timeout time.Duration) {
	t.Helper()
	_ = w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(timeout):
		t.Fatalf("faults: worker %s did not exit within %v of SIGTERM\n%s", w.id, timeout, w.stderrTail())
	}
	if w.err != nil {
		t.Fatalf("faults: worker %s exited with %v after SIGTERM\n%s", w.id, w.err, w.stderrTail())
	}
}

// pause sends SIGSTOP; resume sends SIGCONT.
func (w *worker) pause() time.Time  { at := time.Now(); _ = w.signal(syscall.SIGSTOP); return at }
func (w *worker) resume() time.Time { at := time.Now(); _ = w.signal(syscall.SIGCONT); return at }

// wait blocks until the process has exited and its output is read.
func (w *worker) wait() { <-w.done }

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *worker) exitErr() error {
	if !w.exited() {
		return nil
	}
	return w.err
}

// stderrTail returns the last 8 KiB of the worker's stderr.
func (w *worker) stderrTail() string {
	b, err := os.ReadFile(w.errPath)
	if err != nil {
		return fmt.Sprintf("(stderr of %s unavailable: %v)", w.id, err)
	}
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

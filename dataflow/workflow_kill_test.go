package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// diamondJobs is a -> {b, c} -> d: every workflow test's diamond.
var diamondJobs = []JobConfig{
	{JobName: "a"},
	{JobName: "b", DependsOn: []string{"a"}},
	{JobName: "c", DependsOn: []string{"a"}},
	{JobName: "d", DependsOn: []string{"b", "c"}},
}

// ledger is what a diamond's items did: each item's commit, fenced by
// Shard.CheckOwnership right before it, counted per (workflow run, job,
// item), and the order of item entries and commits.
type ledger struct {
	mu      sync.Mutex
	seq     int64
	commits map[string]int   // run|job|item
	entered map[string]int64 // run|job -> first entry
	ended   map[string]int64 // run|job -> last commit
	done    map[string]int   // run|job -> distinct items committed
	// holds: while a job's hold is set, its items wait at entry for it
	// to close (or their context to end, and then commit nothing).
	holds map[string]chan struct{}
	// entries: every item entry, for a test waiting for a step's items
	// to be inside their run.
	entries chan entry
	waiters map[string]chan struct{} // run|job -> closed when total items committed
	total   int
	// dump logs the store's view of a workflow run when a wait fails.
	dump func(run string)
	// trace: every commit (who, epoch, failover), logged for an item
	// committed more than once.
	trace map[string][]string
}

type entry struct {
	run, job, server string
	item             int
}

func newLedger(total int) *ledger {
	return &ledger{commits: map[string]int{}, entered: map[string]int64{}, ended: map[string]int64{}, done: map[string]int{},
		holds: map[string]chan struct{}{}, trace: map[string][]string{}, entries: make(chan entry, 4096), waiters: map[string]chan struct{}{}, total: total}
}

func (l *ledger) fn(ctx context.Context, s Shard) error {
	if s.WorkflowRun == "" {
		return fmt.Errorf("item %d of %s ran outside a workflow run", s.Item, s.JobName)
	}
	step := s.WorkflowRun + "|" + s.JobName
	l.mu.Lock()
	l.seq++
	if _, ok := l.entered[step]; !ok {
		l.entered[step] = l.seq
	}
	hold := l.holds[s.JobName]
	l.mu.Unlock()
	l.entries <- entry{run: s.WorkflowRun, job: s.JobName, server: s.ServerID, item: s.Item}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.CheckOwnership(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	key := fmt.Sprintf("%s|%d", step, s.Item)
	l.commits[key]++
	l.trace[key] = append(l.trace[key], fmt.Sprintf("seq %d server %s epoch %d failover %v", l.seq, s.ServerID, s.Epoch, s.Failover))
	l.ended[step] = l.seq
	if l.done[step]++; l.done[step] == l.total {
		close(l.waiterLocked(step))
	}
	return nil
}

func (l *ledger) waiterLocked(step string) chan struct{} {
	ch, ok := l.waiters[step]
	if !ok {
		ch = make(chan struct{})
		l.waiters[step] = ch
	}
	return ch
}

func (l *ledger) setHold(job string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.holds[job] = make(chan struct{})
	} else if h := l.holds[job]; h != nil {
		close(h)
		delete(l.holds, job)
	}
}

// waitStep waits until every item of job committed in run.
func (l *ledger) waitStep(t *testing.T, run, job string) {
	t.Helper()
	l.mu.Lock()
	ch := l.waiterLocked(run + "|" + job)
	l.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(90 * time.Second):
		l.mu.Lock()
		t.Logf("ledger: done %v", l.done)
		l.mu.Unlock()
		if l.dump != nil {
			l.dump(run)
		}
		t.Fatalf("%s: step %s did not complete in 90 s", run, job)
	}
}

// waitEntered waits until n items of job entered their run in run and
// returns the servers running them.
func (l *ledger) waitEntered(t *testing.T, run, job string, n int) []string {
	t.Helper()
	var servers []string
	timeout := time.After(60 * time.Second)
	for seen := 0; seen < n; {
		select {
		case e := <-l.entries:
			if e.run == run && e.job == job {
				seen++
				if !slices.Contains(servers, e.server) {
					servers = append(servers, e.server)
				}
			}
		case <-timeout:
			t.Fatalf("%s: %d of %d items of %s entered in 60 s", run, 0, n, job)
		}
	}
	return servers
}

// check asserts the invariants over runs: every item of every step
// committed exactly once per workflow run, d entered after b and c ended,
// b and c after a.
func (l *ledger) check(t *testing.T, runs []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, run := range runs {
		for _, j := range diamondJobs {
			for i := range l.total {
				if n := l.commits[fmt.Sprintf("%s|%s|%d", run, j.JobName, i)]; n != 1 {
					t.Errorf("%s: item %d of %s committed %d times, want exactly 1: %v", run, i, j.JobName, n, l.trace[fmt.Sprintf("%s|%s|%d", run, j.JobName, i)])
				}
			}
			for _, up := range j.DependsOn {
				if in, out := l.entered[run+"|"+j.JobName], l.ended[run+"|"+up]; in < out {
					t.Errorf("%s: %s entered (at %d) before %s's last commit (at %d)", run, j.JobName, in, up, out)
				}
			}
		}
	}
}

// diamondServer is one server of the diamond: a Node on its own session.
type diamondServer struct {
	id   string
	sess store.Store
	node *Node
}

// TestWorkflowDiamondSurvivesKills: a diamond a -> {b, c} -> d of 8 items
// each over 3 servers with failover, on the embedded store and (with
// docker) on real ZooKeeper and on Postgres (coord/pgstore). Workflow runs
// in which a server is killed (its session closed: its ephemeral nodes go
// at once, its runs are cancelled) while a's items run, after a completed
// while b's and c's items are held at their start, and while d's items
// run; the victim then restarts. In every workflow run every item of
// every step commits exactly once (fenced by CheckOwnership), and no step
// starts before the steps it depends on ended.
func TestWorkflowDiamondSurvivesKills(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		srv := memstore.NewServer()
		diamondKills(t, func() store.Store { return srv.Connect(memstore.WithSessionTimeout(2 * time.Second)) })
	})
	t.Run("postgres", func(t *testing.T) {
		if testing.Short() {
			t.Skip("docker: Postgres")
		}
		dsn := integration.SharedPostgres(t).NewSchema(t)
		schema := fmt.Sprintf("diamond_%d", time.Now().UnixNano()%1_000_000_000)
		diamondKills(t, func() store.Store {
			s, err := pgstore.Open(context.Background(), pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: 4 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("zookeeper", func(t *testing.T) {
		if testing.Short() {
			t.Skip("docker: ZooKeeper")
		}
		zk := integration.SharedZooKeeper(t)
		diamondKills(t, func() store.Store {
			s, err := zkstore.Open(context.Background(), zkstore.Config{Servers: zk.Servers(), SessionTimeout: 4 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func diamondKills(t *testing.T, connect func() store.Store) {
	const total = 8
	ns := fmt.Sprintf("diamond-%d", time.Now().UnixNano())
	l := newLedger(total)
	start := func(id string) *diamondServer {
		sess := connect()
		n, err := NewNode(NodeConfig{Store: sess, Namespace: ns, ServerID: id, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range diamondJobs {
			cfg.ShardingTotalCount, cfg.Failover = total, true
			cfg.ReconcileInterval = time.Second
			if err := AddSimpleJob(t.Context(), n, cfg, l.fn); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		return &diamondServer{id: id, sess: sess, node: n}
	}
	l.dump = func(run string) {
		st := connect()
		defer st.Close()
		for _, j := range diamondJobs {
			step, _, err := workflow.ReadStep(context.Background(), st, ns, j.JobName, run)
			items, _, _ := st.Children(context.Background(), store.Join(ns, j.JobName, "workflow", "runs", run, "items"))
			open, _, _ := st.Children(context.Background(), store.Join(ns, j.JobName, "workflow", "open"))
			t.Logf("store: %s %+v err=%v items=%v open=%v", j.JobName, step, err, items, open)
		}
		for _, id := range []string{"s0", "s1", "s2"} {
			kids, _, _ := st.Children(context.Background(), store.Join(ns, "a", "servers", id))
			t.Logf("store: a/servers/%s: %v", id, kids)
		}
	}
	servers := map[string]*diamondServer{}
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		servers[id] = start(id)
	}
	var stopping sync.WaitGroup
	t.Cleanup(func() {
		for _, s := range servers {
			stopNode(t, s.node)
			_ = s.sess.Close()
		}
		stopping.Wait()
	})
	kill := func(id string) {
		s := servers[id]
		_ = s.sess.Close()
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.node.StopAndCancel(ctx)
		}()
		servers[id] = start(id)
	}
	trigger := func() {
		for _, s := range servers {
			if err := s.node.TriggerAll(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}

	// recorded waits until run's last step is decided in the store: its
	// items' completions recorded, not only their effects committed. A kill
	// between an item's commit and its run's record leaves the item to run
	// again in its workflow run (at least once, never lost: a streaming
	// item's rest of work is done there); the planned kills below come
	// after the record, so every commit here is expected exactly once.
	recorded := func(run string) {
		t.Helper()
		testwait.For(t, 60*time.Second, "d's step of "+run+" decided in the store", func() bool {
			for _, s := range servers {
				step, _, err := workflow.ReadStep(context.Background(), s.node.Store(), ns, "d", run)
				return err == nil && step.Decided()
			}
			return false
		})
	}
	var runs []string
	next := func() string {
		run := workflow.RunID("a", int64(len(runs)+1))
		runs = append(runs, run)
		return run
	}
	for round := range 3 {
		// A run with no kill.
		run := next()
		trigger()
		l.waitStep(t, run, "d")
		recorded(run)

		// Killed while a's items run.
		run = next()
		l.setHold("a", true)
		trigger()
		victims := l.waitEntered(t, run, "a", total)
		kill(victims[round%len(victims)])
		l.setHold("a", false)
		l.waitStep(t, run, "d")
		recorded(run)

		// Killed after a completed, while b's and c's items are held at
		// their start (their trigger taken, nothing committed).
		run = next()
		l.setHold("b", true)
		l.setHold("c", true)
		trigger()
		l.waitStep(t, run, "a")
		victims = l.waitEntered(t, run, "b", total)
		kill(victims[round%len(victims)])
		l.setHold("b", false)
		l.setHold("c", false)
		l.waitStep(t, run, "d")
		recorded(run)

		// Killed while d's items run.
		run = next()
		l.setHold("d", true)
		trigger()
		victims = l.waitEntered(t, run, "d", total)
		kill(victims[round%len(victims)])
		l.setHold("d", false)
		l.waitStep(t, run, "d")
		recorded(run)
	}
	l.check(t, runs)
}

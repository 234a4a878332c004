package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

const wait = 20 * time.Second

// runs is a listener sending every finished run.
type runs chan dataflow.RunResult

func (runs) BeforeRun(context.Context, dataflow.RunInfo) {}
func (r runs) AfterRun(_ context.Context, info dataflow.RunInfo, res dataflow.RunResult) {
	r <- res
}

type cluster struct {
	admin   *coord.Admin
	nodes   []*dataflow.Node
	workers []*Worker
	runs    runs
}

// newCluster starts servers Nodes on one memstore, each with a Worker.
func newCluster(t *testing.T, ns string, servers int, allowCmd, allowURL []string) *cluster {
	t.Helper()
	srv := memstore.NewServer()
	admSess := srv.Connect()
	t.Cleanup(func() { _ = admSess.Close() })
	c := &cluster{admin: coord.NewAdmin(admSess, ns), runs: make(runs, 64)}
	for i := range servers {
		sess := srv.Connect(memstore.WithSessionTimeout(2 * time.Second))
		n, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, Namespace: ns, ServerID: fmt.Sprintf("w%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWorker(n, WorkerConfig{AllowCommands: allowCmd, AllowURLs: allowURL, JobOptions: []dataflow.JobOption{dataflow.WithListeners(c.runs)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := w.Stop(ctx); err != nil {
				t.Errorf("worker Stop: %v", err)
			}
			if err := n.Stop(ctx); err != nil {
				t.Errorf("node Stop: %v", err)
			}
			_ = sess.Close()
		})
		c.nodes, c.workers = append(c.nodes, n), append(c.workers, w)
	}
	return c
}

// hosted waits until every worker runs job and its sharding has settled
// over them (a trigger during the joins' churn may see an older sharding).
func (c *cluster) hosted(t *testing.T, job string) {
	t.Helper()
	for i, w := range c.workers {
		testwait.For(t, wait, fmt.Sprintf("worker %d to run %s", i, job), func() bool { return slices.Contains(w.Jobs(), job) })
	}
	testwait.For(t, wait, "sharding settled", func() bool {
		st, err := c.admin.Status(context.Background(), job)
		if err != nil || st.ReshardingPending || len(st.Servers) != len(c.workers) {
			return false
		}
		for _, s := range st.Servers {
			if len(s.Sharding) == 0 || s.Status == "OFFLINE" {
				return false
			}
		}
		return true
	})
}

// trigger runs job on every server and returns the runs' results.
func (c *cluster) trigger(t *testing.T, job string) (success, failure int64) {
	t.Helper()
	if err := c.admin.Trigger(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	for range c.workers {
		res := testwait.Recv(t, wait, "a run of "+job, c.runs)
		success += res.Success
		failure += res.Failure
	}
	return success, failure
}

func TestWorkerRunsStoredScriptJob(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(t, "stored", 2, []string{"/bin/sh -c * sh"}, nil)
	script := fmt.Sprintf(`touch "%s/$SHARDFLOW_ITEM.$SHARDFLOW_SERVER_ID.$$"`, dir)
	cfg := jobconfig.Config{JobName: "touch", ShardingTotalCount: 4, JobType: jobconfig.JobTypeScript,
		Script: jobconfig.ScriptSettings{CommandLine: "/bin/sh -c '" + script + "' sh"}}
	if err := c.admin.CreateJob(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.CreateJob(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second CreateJob: %v, want ErrJobExists", err)
	}
	c.hosted(t, "touch")
	for round := 1; round <= 2; round++ {
		success, failure := c.trigger(t, "touch")
		if success != 4 || failure != 0 {
			t.Fatalf("round %d: success %d failure %d, want 4 and 0", round, success, failure)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		perItem := map[string]int{}
		servers := map[string]bool{}
		for _, f := range files {
			parts := strings.Split(filepath.Base(f), ".")
			perItem[parts[0]]++
			servers[parts[1]] = true
			_ = os.Remove(f)
		}
		if len(perItem) != 4 || perItem["0"] != 1 || perItem["1"] != 1 || perItem["2"] != 1 || perItem["3"] != 1 {
			t.Fatalf("round %d: runs per item %v, want each of 0..3 once", round, perItem)
		}
		if len(servers) != 2 {
			t.Fatalf("round %d: items ran on %v, want both servers", round, servers)
		}
	}

	// Removing the job (shut down, then remove) drops it from every worker.
	if err := c.admin.Shutdown(t.Context(), "touch", ""); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, wait, "every server to leave the shut-down job", func() bool {
		st, err := c.admin.Status(context.Background(), "touch")
		if err != nil {
			return false
		}
		for _, s := range st.Servers {
			if s.Status != "OFFLINE" {
				return false
			}
		}
		return true
	})
	for i, n := range c.nodes {
		testwait.For(t, wait, fmt.Sprintf("node %d to drop the shut-down job", i), func() bool { return !slices.Contains(n.Jobs(), "touch") })
	}
	if err := c.admin.Remove(t.Context(), "touch", ""); err != nil {
		t.Fatal(err)
	}
	for i, w := range c.workers {
		testwait.For(t, wait, fmt.Sprintf("worker %d to drop the removed job", i), func() bool { return len(w.Jobs()) == 0 })
	}
	// Added again under the same name, it runs again.
	if err := c.admin.CreateJob(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	c.hosted(t, "touch")
}

func TestWorkerRefusesCommandOutsideAllowList(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c := newCluster(t, "refuse", 2, []string{"/opt/jobs/"}, nil)
	cfg := jobconfig.Config{JobName: "evil", ShardingTotalCount: 2, JobType: jobconfig.JobTypeScript,
		Script: jobconfig.ScriptSettings{CommandLine: "/usr/bin/touch " + marker}}
	if err := c.admin.CreateJob(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	for i, w := range c.workers {
		testwait.For(t, wait, fmt.Sprintf("worker %d to refuse the job", i), func() bool { return w.Refused()["evil"] != "" })
		if len(w.Jobs()) != 0 || len(c.nodes[i].Jobs()) != 0 {
			t.Fatalf("worker %d joined a refused job: %v", i, w.Jobs())
		}
	}
	var st coord.JobStatus
	testwait.For(t, wait, "both refusals in status", func() bool {
		var err error
		st, err = c.admin.Status(context.Background(), "evil")
		return err == nil && len(st.Refused) == 2
	})
	if len(st.Refused) != 2 || st.Refused[0].ID != "w0" || !strings.Contains(st.Refused[0].Reason, "--allow-command") || len(st.Servers) != 0 {
		t.Fatalf("status refused = %+v servers = %+v; want both workers refusing, none joined", st.Refused, st.Servers)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran: %v", err)
	}
	// config set refuses a command line that does not split.
	bad := jobconfig.Config{JobName: "broken", ShardingTotalCount: 1, JobType: jobconfig.JobTypeScript, Script: jobconfig.ScriptSettings{CommandLine: "/opt/jobs/x"}}
	if err := c.admin.CreateJob(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.SetConfig(t.Context(), "broken", "scriptCommandLine", "/opt/jobs/'x"); err == nil {
		t.Fatal("config set accepted an unterminated quote")
	}
}

func TestWorkerRunsStoredHTTPJob(t *testing.T) {
	var mu sync.Mutex
	items := map[int]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sc ShardContext
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &sc); err != nil || r.Header.Get("X-Team") != "ops" || r.Method != http.MethodPut {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		items[sc.ShardingItem]++
		mu.Unlock()
	}))
	defer srv.Close()
	c := newCluster(t, "http", 2, nil, []string{srv.URL + "/jobs/"})
	cfg := jobconfig.Config{JobName: "hook", ShardingTotalCount: 3, JobType: jobconfig.JobTypeHTTP,
		HTTP: jobconfig.HTTPSettings{URL: srv.URL + "/jobs/run", Method: "PUT", Headers: "X-Team: ops"}}
	if err := c.admin.CreateJob(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	c.hosted(t, "hook")
	if success, failure := c.trigger(t, "hook"); success != 3 || failure != 0 {
		t.Fatalf("success %d failure %d, want 3 and 0", success, failure)
	}
	mu.Lock()
	got := map[int]int{}
	for k, v := range items {
		got[k] = v
	}
	mu.Unlock()
	if len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("requests per item %v, want one each", got)
	}

	// A live edit to a URL outside the allow-list is refused at the next
	// run: the items fail and the refusal shows in status.
	if err := c.admin.SetConfig(t.Context(), "hook", "httpUrl", srv.URL+"/admin/drop"); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.nodes {
		testwait.For(t, wait, fmt.Sprintf("node %d to see the new URL", i), func() bool {
			cfg, _ := n.JobConfig("hook")
			return strings.HasSuffix(cfg.HTTP.URL, "/admin/drop")
		})
	}
	if success, failure := c.trigger(t, "hook"); success != 0 || failure != 3 {
		t.Fatalf("after the edit: success %d failure %d, want 0 and 3", success, failure)
	}
	testwait.For(t, wait, "both refusals in status", func() bool {
		st, err := c.admin.Status(context.Background(), "hook")
		return err == nil && len(st.Refused) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(items) != 3 {
		t.Fatalf("the refused URL was requested: %v", items)
	}
}

// The Worker's lifecycle: Stop before Start leaves a Worker that starts
// nothing; Start runs once; Stop waits for the watch goroutine and may be
// called again; a Start after Stop starts nothing.
func TestWorkerLifecycle(t *testing.T) {
	n, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), Namespace: "lifecycle", ServerID: "w0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })

	early, err := NewWorker(n, WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := early.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start = %v", err)
	}
	if err := early.Start(t.Context()); err != nil || early.life.Running() {
		t.Fatalf("Start after Stop = %v, running %v; want nil, not running", err, early.life.Running())
	}

	w, err := NewWorker(n, WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Start(ended); err == nil || w.life.Running() {
		t.Fatalf("Start with an ended ctx = %v, running %v; want the ctx's error", err, w.life.Running())
	}
	passed := w.Changed()
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatalf("second Start = %v", err)
	}
	testwait.Recv(t, wait, "the worker's first pass", passed)
	if err := w.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.life.Done():
	default:
		t.Fatal("Stop returned before the watch goroutine")
	}
	if err := w.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	if err := w.Start(t.Context()); err != nil || w.life.Running() {
		t.Fatalf("Start after Stop = %v, running %v; want nil, not running", err, w.life.Running())
	}
}

// TestWorkerRejoinsAfterPreviousIncarnation: a worker restarted under the
// same server id while its previous incarnation's session still lives
// (killed, not yet expired: the store expires it a little after its
// timeout) is refused the join at first, and joins once that session is
// gone. Before, the refusal stuck until the job was removed and added
// again: `shardflow serve` killed and restarted at once ran none of its
// stored jobs.
func TestWorkerRejoinsAfterPreviousIncarnation(t *testing.T) {
	srv := memstore.NewServer()
	admSess := srv.Connect()
	t.Cleanup(func() { _ = admSess.Close() })
	admin := coord.NewAdmin(admSess, "rejoin")
	if err := admin.CreateJob(t.Context(), jobconfig.Config{JobName: "j", ShardingTotalCount: 2, JobType: jobconfig.JobTypeScript,
		Script: jobconfig.ScriptSettings{CommandLine: "/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	start := func(sess *memstore.Session) *Worker {
		t.Helper()
		n, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, Namespace: "rejoin", ServerID: "w0"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWorker(n, WorkerConfig{AllowCommands: []string{"/bin/true"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_ = w.Stop(ctx)
			_ = n.Stop(ctx)
			_ = sess.Close()
		})
		return w
	}
	// The previous incarnation: its session outlives the new one's wait.
	old := srv.Connect(memstore.WithSessionTimeout(time.Hour))
	oldWorker := start(old)
	testwait.For(t, wait, "the first incarnation to run j", func() bool { return slices.Contains(oldWorker.Jobs(), "j") })
	old.Disconnect() // killed: its session lingers

	w := start(srv.Connect(memstore.WithSessionTimeout(200 * time.Millisecond)))
	testwait.For(t, wait, "the restarted worker's join refused while the old session lives", func() bool {
		st, err := admin.Status(t.Context(), "j")
		return err == nil && len(st.Refused) == 1 && strings.Contains(st.Refused[0].Reason, "server id already registered")
	})
	old.Expire()
	testwait.For(t, wait, "the restarted worker to run j", func() bool { return slices.Contains(w.Jobs(), "j") })
	testwait.For(t, wait, "its refusal cleared", func() bool {
		st, err := admin.Status(t.Context(), "j")
		return err == nil && len(st.Refused) == 0
	})
}

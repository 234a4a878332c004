// Command fireworker is one server process of the fires measurement
// (TestFires in dataflow, `make bench-fires`): a dataflow.Node on its own
// session of ZooKeeper (--store zk) or Postgres (--store pg) hosting --jobs no-op jobs that share one cron, with a
// listener that records, for every run, when the run started (before its
// Begin) and when BeforeRun was called (after it).
//
// It prints "ready jobs=N add=S requests=... reads=... multis=... ops=..."
// once every job is added and the Node runs (the store requests so far:
// the joins'). With --hold it adds the jobs before starting the Node,
// prints "added ..." (the same fields) and starts the Node only on
// SIGUSR1: the harness starts every server's jobs at once, after all of
// them are added, so that no job fires while the others are being added.
// On SIGTERM it stops the Node gracefully, writes one line per run to
// --out ("job reason started_unix_ns before_run_unix_ns", reason as
// dataflow.Reason's number), prints "stopped runs=R errors=E" and the
// store requests the Node made ("reads=... multis=... ops=..." after
// "ready", counted by internal/storecount; on ZooKeeper "batches=..." too:
// the combined multis sent for them) and exits 0. --group-commit=false
// opens ZooKeeper with zkstore.Config.NoGroupCommit (a request per Multi);
// --gc-ops and --gc-inflight tune the group committer (a groupcommit.Store
// around a store opened without its own); --cpuprofile writes a CPU profile
// from "ready" to the stop; --reqlog writes every store request's kind,
// path class and latency, per second since the process started. It
// prints "warm after=S" once every job has had a cron run reach
// BeforeRun (the first fire after a start is every job's first Begin, not
// the steady state). A failure to
// start prints "error: ..." and exits 1.
//
// Usage:
//
//	fireworker --zk 127.0.0.1:2181 --namespace ns --server-id s1 \
//	    --jobs 1000 --total 3 --cron '* * * * * ?' --out runs.txt
//	fireworker --store pg --pg postgres://... (the rest as above)
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/storecount"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	store, zk, pg, namespace, serverID string
	cron, out, cpuProfile, reqLog      string
	jobs, total, adders                int
	sessionTimeout, stopTimeout        time.Duration
	groupCommit, hold, monitor         bool
	gcOps, gcInFlight                  int
}

func parseFlags() (options, error) {
	var o options
	flag.StringVar(&o.store, "store", "zk", "coordination store: zk (ZooKeeper, --zk) or pg (Postgres, --pg)")
	flag.StringVar(&o.zk, "zk", "", "ZooKeeper servers, comma-separated host:port (with --store zk)")
	flag.StringVar(&o.pg, "pg", "", "Postgres DSN (with --store pg)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace (required)")
	flag.StringVar(&o.serverID, "server-id", "", "server id (required)")
	flag.StringVar(&o.cron, "cron", "* * * * * ?", "every job's cron, with seconds")
	flag.StringVar(&o.out, "out", "", "file the runs are written to on SIGTERM (required)")
	flag.IntVar(&o.jobs, "jobs", 0, "number of jobs (required, > 0)")
	flag.IntVar(&o.total, "total", 1, "each job's shardingTotalCount")
	flag.IntVar(&o.adders, "adders", 32, "goroutines calling AddJob")
	flag.DurationVar(&o.sessionTimeout, "session-timeout", 10*time.Second, "ZooKeeper session timeout")
	flag.DurationVar(&o.stopTimeout, "stop-timeout", time.Minute, "bound of the graceful stop on SIGTERM")
	flag.BoolVar(&o.hold, "hold", false, "add the jobs before starting the Node, print \"added ...\" and start it (the jobs fire) on SIGUSR1")
	flag.BoolVar(&o.monitor, "monitor-execution", true, "every job's monitorExecution (false: JobConfig.DisableMonitorExecution; a steady-state run then writes nothing)")
	flag.BoolVar(&o.groupCommit, "group-commit", true, "ZooKeeper: commit concurrent Multis together (false: zkstore.Config.NoGroupCommit)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile from ready to the stop to this file")
	flag.StringVar(&o.reqLog, "reqlog", "", "write every store request's kind, path class and latency, per second since the start, to this file at the stop")
	flag.IntVar(&o.gcOps, "gc-ops", 0, "ZooKeeper: a group commit batch's operations (0: zkstore's default; with --gc-inflight, the store is wrapped by a groupcommit.Store so tuned)")
	flag.IntVar(&o.gcInFlight, "gc-inflight", 0, "ZooKeeper: group commit batches in flight (0: zkstore's default)")
	flag.Parse()
	switch {
	case o.store != "zk" && o.store != "pg":
		return o, fmt.Errorf("--store %q: use zk or pg", o.store)
	case o.store == "zk" && o.zk == "":
		return o, errors.New("--zk is required with --store zk: ZooKeeper servers as host:port[,host:port]")
	case o.store == "pg" && o.pg == "":
		return o, errors.New("--pg is required with --store pg: a Postgres DSN")
	case o.namespace == "", o.serverID == "", o.out == "":
		return o, errors.New("--namespace, --server-id and --out are required")
	case o.jobs <= 0:
		return o, fmt.Errorf("--jobs %d: must be > 0", o.jobs)
	case o.total <= 0:
		return o, fmt.Errorf("--total %d: must be > 0", o.total)
	case o.adders <= 0:
		return o, fmt.Errorf("--adders %d: must be > 0", o.adders)
	}
	return o, nil
}

// noop is a job with nothing to do: a run is its coordination only.
type noop struct{}

func (noop) Fetch(context.Context, dataflow.Shard) ([]int, error) { return nil, nil }
func (noop) Process(context.Context, dataflow.Shard, int) error   { return nil }

// runRecord is one run as the listener saw it.
type runRecord struct {
	job       int
	reason    dataflow.Reason
	scheduled time.Time // RunInfo.ScheduledFire: the tick a cron run serves
	started   time.Time // RunInfo.Started: before the run's Begin
	beforeRun time.Time // when BeforeRun was called: after it
}

// recorder is every job's listener: one listener for many jobs is called
// concurrently, so it appends under a mutex (a few microseconds per run).
// It prints "warm after=S" once every job has had a cron run reach
// BeforeRun (S: seconds since the Node started): the first fire after a
// start is each job's first Begin (its plan written, the leader's
// sharding), not the steady state, and the harness measures after it.
type recorder struct {
	mu      sync.Mutex
	runs    []runRecord
	fired   []bool // by job: a cron run reached BeforeRun
	nfired  int
	started time.Time // the Node's start
}

// jobListener tags the recorder with the job's index.
type jobListener struct {
	r   *recorder
	job int
}

// BeforeRun implements dataflow.JobListener.
func (l jobListener) BeforeRun(_ context.Context, info dataflow.RunInfo) {
	now := time.Now()
	l.r.mu.Lock()
	l.r.runs = append(l.r.runs, runRecord{job: l.job, reason: info.Reason, scheduled: info.ScheduledFire, started: info.Started, beforeRun: now})
	if info.Reason == dataflow.ReasonCron && !l.r.fired[l.job] {
		l.r.fired[l.job] = true
		if l.r.nfired++; l.r.nfired == len(l.r.fired) {
			fmt.Printf("warm after=%.2f\n", now.Sub(l.r.started).Seconds())
		}
	}
	l.r.mu.Unlock()
}

// AfterRun implements dataflow.JobListener.
func (jobListener) AfterRun(context.Context, dataflow.RunInfo, dataflow.RunResult) {}

// jobName is job i's name, the same on every server.
func jobName(i int) string { return fmt.Sprintf("f%05d", i) }

func run(ctx context.Context) error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("server", o.serverID)
	raw, err := openStore(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { _ = raw.Close() }()
	var logged *reqLog
	under := raw
	if o.reqLog != "" {
		logged = newReqLog(raw)
		under = logged
	}
	st := storecount.New(under)

	var errCount atomic.Int64
	node, err := dataflow.NewNode(dataflow.NodeConfig{
		Store: st, Namespace: o.namespace, ServerID: o.serverID, Logger: logger,
		OnError: func(job string, err error) {
			if errCount.Add(1) <= 5 { // the first few say what went wrong
				logger.Error("run error", "job", job, "err", err)
			}
		},
	})
	if err != nil {
		return err
	}
	// Registered before anything is printed: SIGUSR1's default action
	// ends the process.
	release := make(chan os.Signal, 1)
	signal.Notify(release, syscall.SIGUSR1)
	defer signal.Stop(release)
	if !o.hold {
		if err := node.Start(ctx); err != nil {
			return err
		}
	}
	rec := &recorder{fired: make([]bool, o.jobs), started: time.Now()}
	start := time.Now()
	if err := addJobs(ctx, node, o, rec); err != nil {
		_ = node.Stop(context.Background())
		return err
	}
	add := time.Since(start).Seconds()
	counts := st.Counts()
	if o.hold {
		// The jobs are joined but fire only once the Node starts: on the
		// harness's SIGUSR1, when every server has added its jobs.
		fmt.Printf("added jobs=%d add=%.2f requests=%d reads=%d multis=%d ops=%d\n", o.jobs, add, counts.Requests(), counts.Reads, counts.Multis, counts.MultiOps)
		select {
		case <-release:
		case <-ctx.Done():
			return node.Stop(context.Background())
		}
		rec.mu.Lock()
		rec.started = time.Now()
		rec.mu.Unlock()
		if err := node.Start(ctx); err != nil {
			return err
		}
		counts = st.Counts()
	}
	batches := groupBatches(raw)
	fmt.Printf("ready jobs=%d add=%.2f requests=%d reads=%d multis=%d ops=%d\n", o.jobs, add, counts.Requests(), counts.Reads, counts.Multis, counts.MultiOps)
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		defer pprof.StopCPUProfile()
	}

	<-ctx.Done()
	// The requests of the running phase, before the stop's own.
	counts, batches = st.Counts().Sub(counts), groupBatches(raw)-batches
	stopCtx, cancel := context.WithTimeout(context.Background(), o.stopTimeout)
	defer cancel()
	stopErr := node.Stop(stopCtx)
	// The runs recorded are written even when the stop ran out of time
	// (runs of 10,000 jobs still waiting at a loaded machine's SIGTERM):
	// the window's runs are over by then.
	rec.mu.Lock()
	runs := slices.Clone(rec.runs)
	rec.mu.Unlock()
	if err := writeRuns(o.out, runs); err != nil {
		return err
	}
	if logged != nil {
		if err := logged.write(o.reqLog); err != nil {
			return err
		}
	}
	if stopErr != nil {
		return fmt.Errorf("stop: %w", stopErr)
	}
	fmt.Printf("stopped runs=%d errors=%d reads=%d multis=%d ops=%d batches=%d\n", len(runs), errCount.Load(),
		counts.Reads, counts.Multis, counts.MultiOps, batches)
	return nil
}

// groupBatches is the number of combined multis a ZooKeeper store sent
// (zkstore.GroupCommitStats, or the tuned groupcommit.Store's), -1 on
// other stores.
func groupBatches(st store.Store) int64 {
	switch z := st.(type) {
	case *zkstore.Store:
		return zkstore.GroupCommitStats(z).Batches
	case *groupcommit.Store:
		return z.Stats().Batches
	}
	return -1
}

// openStore opens the session of --store.
func openStore(ctx context.Context, o options, logger *slog.Logger) (store.Store, error) {
	if o.store == "pg" {
		st, err := pgstore.Open(ctx, pgstore.Config{DSN: o.pg, SessionTimeout: o.sessionTimeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("connect to Postgres: %w", err)
		}
		return st, nil
	}
	tuned := o.groupCommit && (o.gcOps > 0 || o.gcInFlight > 0)
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: strings.Split(o.zk, ","), SessionTimeout: o.sessionTimeout, Logger: logger,
		NoGroupCommit: !o.groupCommit || tuned})
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper %s: %w", o.zk, err)
	}
	if tuned {
		return groupcommit.New(st, groupcommit.WithMaxBatchOps(o.gcOps), groupcommit.WithMaxInFlight(o.gcInFlight)), nil
	}
	return st, nil
}

// addJobs adds the jobs from o.adders goroutines: one AddJob is a few
// round trips, so a single adder would take minutes at 10,000 jobs.
func addJobs(ctx context.Context, node *dataflow.Node, o options, rec *recorder) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.adders)
	for range o.adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < o.jobs; i = int(next.Add(1)) - 1 {
				cfg := dataflow.JobConfig{JobName: jobName(i), Cron: o.cron, ShardingTotalCount: o.total, DisableMonitorExecution: !o.monitor}
				if err := dataflow.AddJob[int](ctx, node, cfg, noop{}, dataflow.WithListeners(jobListener{r: rec, job: i})); err != nil {
					errs <- fmt.Errorf("add job %s: %w", cfg.JobName, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when closed empty
}

func writeRuns(path string, runs []runRecord) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, r := range runs {
		// job reason started beforeRun scheduled (0: not a cron run)
		var scheduled int64
		if !r.scheduled.IsZero() {
			scheduled = r.scheduled.UnixNano()
		}
		fmt.Fprintf(w, "%d %d %d %d %d\n", r.job, int(r.reason), r.started.UnixNano(), r.beforeRun.UnixNano(), scheduled)
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

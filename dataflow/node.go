package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/internal/startstop"
	"github.com/shardflow/shardflow/internal/stats"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// reportWriters bounds the jobs' interval count writes in flight at once
// (stats.Group): many jobs due together are written a few at a time.
const reportWriters = 8

// stopLeavers bounds the jobs Stop unschedules (and whose last counts it
// reports) at once; they then leave the cluster together
// (protocol.Registry.Close).
const stopLeavers = 32

// Timeouts of coordination calls the Node makes without a caller's ctx.
const (
	// completeTimeout bounds Run.Complete, which runs even when the run's
	// context is cancelled (the items' running nodes must be cleared).
	completeTimeout = 30 * time.Second
	// detachTimeout bounds leaving a job that an operator shut down or
	// removed, and the teardown after a Stop whose ctx already ended.
	detachTimeout = 10 * time.Second
)

// NodeConfig configures a Node. Zero fields take the stated defaults.
type NodeConfig struct {
	// Store is the coordination store session shared by all jobs of the
	// Node: zkstore.Open for ZooKeeper, or memstore.NewServer().Connect()
	// for a single process with no cluster (every Node on one memstore
	// server shares it; a Node alone on one owns every item). Required:
	// NewNode refuses nil, so that no production process silently runs on
	// a private in-memory store. The Node does not close it.
	Store store.Store
	// Namespace is the root node of the jobs. Default "shardflow".
	Namespace string
	// ServerID identifies this process among a job's servers (see
	// protocol.RegistryConfig.ServerID). It is set once here and carried
	// everywhere else: Shard.ServerID (which sources/postgres writes to
	// claimed_by), the servers nodes, history records and the metrics'
	// server label. Default: the first non-loopback IPv4 address; set it
	// (e.g. the pod name) when processes share an address.
	ServerID string
	// Logger receives the Node's events. Default slog.Default(). Every
	// line carries the attribute server (the effective ServerID), added by
	// the Node once: a Logger that carries it already repeats it.
	Logger *slog.Logger
	// OnError is called with errors of a job that no caller receives: a
	// refused run (clock skew, bad stored config), a failed Complete, a
	// listener's panic, a distribute-once timeout, and the run's errors
	// under ErrorPolicyReturn. It is called from the job's run goroutine;
	// keep it short. Default nil: such errors are logged at error level.
	OnError func(job string, err error)
	// ErrorHandler, when set, sees every error of the jobs' code before it
	// is acted on and may mark it Permanent or RetryAfter (see
	// ErrorHandler). Default nil: errors are acted on as returned.
	ErrorHandler ErrorHandler
	// Metrics, when set, is where the Node registers its Prometheus
	// collector at NewNode (unregistered at the end of Stop). Its metrics
	// carry the label server=ServerID, and job (and item) of the job:
	//
	//	shardflow_items_processed_total{result="success|failure"}  counter
	//	shardflow_runs_total{result="success|failure"}             counter
	//	shardflow_run_duration_seconds                             histogram, 10 ms to 1 h
	//	shardflow_reported_errors_total                            counter, errors runs went on from (Shard.ReportError)
	//	shardflow_last_run_timestamp_seconds                       gauge, end of the last run
	//	shardflow_last_success_timestamp_seconds                   gauge, end of the last run without error
	//	shardflow_item_last_success_timestamp_seconds{item}        gauge, end of the item's last run without failure
	//	shardflow_item_run_errors_total{item}                      counter, runs of the item that ended in an error
	//	shardflow_item_consecutive_failed_runs{item}               gauge, such runs in a row on this server
	//
	// A job's metrics appear when it is added and go when it is removed.
	// Default nil: no metrics.
	Metrics prometheus.Registerer
	// History, when set, receives one record per shard item run (job,
	// server, item, epoch, source, begin, end, counts, first error), after
	// the run is completed. It must not block: use a history.Buffer (see
	// history/pghistory for Postgres). Default nil: no history.
	History history.Recorder
	// TracerProvider, when set, traces every run with OpenTelemetry: a
	// span per run, per shard item, per Fetch and per processed batch (see
	// the package doc for the names); the contexts given to Fetch and
	// Process carry them, so the user's own spans nest underneath.
	// Default nil: no tracing.
	TracerProvider trace.TracerProvider
	// OfflineServerGrace is how long a job's leader keeps the node of a
	// server that went offline (it crashed, or stopped and did not come
	// back) before deleting it from the job's servers, and so from status.
	// A server back under its id within the grace rejoins on its old node;
	// with a new id per process (a Kubernetes Deployment), the grace is how
	// long a replaced pod stays listed OFFLINE. The leader checks every
	// JobConfig.ReconcileInterval, so a node goes between the grace and the
	// grace plus one interval after it went offline. Nodes an operator
	// disabled are kept. Default 10m (protocol.DefaultOfflineServerGrace).
	OfflineServerGrace time.Duration

	// testSignals is for shardflow's own tests (protocol.RegistryConfig's);
	// tests outside this package set it with testsignal.WithNodeSignals.
	testSignals *testsignal.Coord
}

// Node hosts many dataflow jobs in one process: one coordination session
// and registry, one cron scheduler, at most one run per job at a time.
//
// Lifecycle (as river's Client): NewNode, AddJob (before or after Start),
// Start, then Stop or StopAndCancel (or the end of Start's ctx). Stop is
// safe before Start and more than once. Every goroutine the Node started
// has returned when Stopped is closed, which a Stop or StopAndCancel that
// returns nil waits for; one that returns ctx.Err() leaves the rest of the
// stop to finish in the background (see Stop). All methods are safe for
// concurrent use.
//
// Cost of an idle job: one goroutine (its coordination watcher, which
// also handles the job's operator signals); the counts of every job are
// reported by one shared goroutine, and the scheduler adds one runner
// goroutine per job only while a run is due or in progress.
type Node struct {
	cfg     NodeConfig
	logger  *slog.Logger
	st      store.Store
	metrics *stats.Collector // nil: no metrics
	reg     *protocol.Registry
	sched   *scheduler
	reports *stats.Group // ticks every job's count reporter
	tracer  trace.Tracer // nil: no tracing

	ctx    context.Context // the Node's lifetime; cancelled at the end of Stop
	cancel context.CancelFunc
	// halt is cancelled when Stop or StopAndCancel begins.
	halt       context.Context
	haltCancel context.CancelFunc

	// life is Start once (Started); the stop is the Node's own (stopOnce,
	// teardown, stopped).
	life startstop.BaseStartStop
	// stopOnce starts teardown, the Node's one goroutine of its own, which
	// closes stopped when everything the Node started has returned.
	stopOnce sync.Once
	stopped  chan struct{}
	// escalateOnce cancels the runs of a stop in flight (StopAndCancel, or
	// a Stop whose ctx ended) and arms bound, which cancels teardownCtx
	// detachTimeout later: teardown's store calls do not wait forever for
	// a store that is down.
	escalateOnce   sync.Once
	teardownCtx    context.Context
	cancelTeardown context.CancelFunc
	bound          *time.Timer // under mu; nil until escalated
	tornDown       bool        // under mu; set when teardown ends
	// unhookStart releases the watch on Start's ctx (stops on its end).
	unhookStart func() bool
	// detaching counts the goroutines detaching a job an operator shut
	// down or removed; Stop waits for them. Added to under mu only while
	// not stopping.
	detaching sync.WaitGroup
	// completes bound the runs' completions (completeTimeout).
	completes completeContexts

	mu       sync.Mutex
	jobs     map[string]*hostedJob
	stopping bool
}

// hostedJob is one job on the Node.
type hostedJob struct {
	name     string
	cj       *protocol.Job
	pipeline func(ctx context.Context, shards []Shard, cfg pipelineConfig) RunResult
	opts     jobOptions
	counter  *stats.Counter
	reporter *stats.Reporter

	detachOnce sync.Once
	detachErr  error
	// wf is the job's workflow state (coord/workflow): the runs it serves.
	wf workflowJob
	// halt is cancelled when the job starts being detached: no new run,
	// streaming loops end, a run still waiting in Begin gives up.
	halt       context.Context
	haltCancel context.CancelFunc
	// stopBegin is cancelled when the Node's halt or h's is: a run's Begin
	// waits on it (one AfterFunc per run, on this job's context, not two,
	// one of them on the Node's, which every run of every job shares).
	stopBegin context.Context
}

// NewNode returns a Node for cfg. It connects nothing and starts no
// goroutine; jobs join the cluster in AddJob and are scheduled from Start.
// Errors: ErrNoStore when cfg.Store is nil, a bad ServerID or Namespace,
// or the metrics' registration.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg, logger: cfg.Logger, st: cfg.Store, jobs: map[string]*hostedJob{}}
	reg, err := protocol.NewRegistry(n.st, protocol.RegistryConfig{Namespace: cfg.Namespace, ServerID: cfg.ServerID, ServerIDSetting: "NodeConfig.ServerID", OfflineServerGrace: cfg.OfflineServerGrace, Logger: cfg.Logger, TestSignals: cfg.testSignals})
	if err != nil {
		return nil, fmt.Errorf("dataflow: NewNode: %w", err)
	}
	n.reg = reg
	if cfg.Metrics != nil {
		n.metrics = stats.NewCollector(reg.ServerID())
		if err := cfg.Metrics.Register(n.metrics); err != nil {
			return nil, fmt.Errorf("dataflow: NewNode: NodeConfig.Metrics: registering the collector of server %q: %w; give each Node its own prometheus.Registerer (or prometheus.WrapRegistererWith)", reg.ServerID(), err)
		}
	}
	// The registry adds server (and job) to its own lines; the Node's
	// lines get server here, once.
	n.logger = cfg.Logger.With("server", reg.ServerID())
	n.sched = newScheduler(n.logger)
	n.reports = stats.NewGroup(reportWriters)
	n.tracer = tracerOf(cfg.TracerProvider)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.halt, n.haltCancel = context.WithCancel(context.Background())
	n.teardownCtx, n.cancelTeardown = context.WithCancel(context.Background())
	n.stopped = make(chan struct{})
	return n, nil
}

// ServerID returns the effective server id.
func (n *Node) ServerID() string { return n.reg.ServerID() }

// Store returns the Node's coordination store session, for code that works beside the Node's
// jobs, such as package jobs' Worker. Do not close it.
func (n *Node) Store() store.Store { return n.st }

// Namespace returns the Node's namespace, with its default applied.
func (n *Node) Namespace() string {
	if n.cfg.Namespace == "" {
		return protocol.DefaultNamespace
	}
	return n.cfg.Namespace
}

// AddJob adds a per-item job to n: it validates cfg (after defaults),
// joins the cluster (the stored config wins unless cfg.Overwrite; see
// protocol.Registry.Join) and schedules the job on the stored config's cron.
// It blocks for the join, bounded by ctx; when this server id is still
// registered by its own previous, dying session (a quick restart after a
// crash), the join waits for that session to expire, up to the store's
// session timeout, instead of failing, so give ctx at least that long.
// Errors: a *jobconfig.FieldError (wrapping jobconfig.ErrInvalid),
// ErrJobExists, ErrNodeStopped, ErrBadCron, ctx.Err(), or a coord error
// such as protocol.ErrServerIDInUse.
func AddJob[T any](ctx context.Context, n *Node, cfg JobConfig, job Job[T], opts ...JobOption) error {
	if job == nil {
		return fmt.Errorf("dataflow: AddJob %q: job is nil; pass a Job implementation", cfg.JobName)
	}
	return n.add(ctx, cfg, func(ctx context.Context, shards []Shard, pc pipelineConfig) RunResult {
		return runJob(ctx, job, shards, pc)
	}, opts)
}

// AddBatchJob is AddJob for a BatchJob.
func AddBatchJob[T any](ctx context.Context, n *Node, cfg JobConfig, job BatchJob[T], opts ...JobOption) error {
	if job == nil {
		return fmt.Errorf("dataflow: AddBatchJob %q: job is nil; pass a BatchJob implementation", cfg.JobName)
	}
	return n.add(ctx, cfg, func(ctx context.Context, shards []Shard, pc pipelineConfig) RunResult {
		return runBatchJob(ctx, job, shards, pc)
	}, opts)
}

func (n *Node) add(ctx context.Context, cfg JobConfig, pipeline func(context.Context, []Shard, pipelineConfig) RunResult, opts []JobOption) error {
	// The join validates cfg (after defaults) and encodes it, once; the
	// job runs on the config the join returns (Job.Config).
	h := &hostedJob{name: cfg.JobName, pipeline: pipeline, counter: new(stats.Counter)}
	h.wf.steps = workflow.ForJob(n.st, n.Namespace(), cfg.JobName)
	h.halt, h.haltCancel = context.WithCancel(context.Background())
	// stopBegin ends with n.halt (its child) or with h.halt (haltCancel
	// cancels both); a job that is not added drops it.
	var stopBeginCancel context.CancelFunc
	h.stopBegin, stopBeginCancel = context.WithCancel(n.halt)
	haltCancel := h.haltCancel
	h.haltCancel = func() { haltCancel(); stopBeginCancel() }
	added := false
	defer func() {
		if !added {
			stopBeginCancel()
		}
	}()
	for _, o := range opts {
		o(&h.opts)
	}

	n.mu.Lock()
	if n.stopping {
		n.mu.Unlock()
		return ErrNodeStopped
	}
	if _, dup := n.jobs[h.name]; dup {
		n.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrJobExists, h.name)
	}
	n.jobs[h.name] = nil // reserve the name while joining
	n.mu.Unlock()

	// The join ends with ctx, or when the Node's teardown begins.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopJoin := context.AfterFunc(n.ctx, cancel)
	defer stopJoin()
	err := n.checkDependsOn(ctx, cfg)
	var cj *protocol.Job
	if err == nil {
		cj, err = n.reg.Join(ctx, cfg)
	}
	if err == nil {
		h.cj = cj
		eff := cj.Config()
		err = n.linkDependsOn(ctx, eff)
		if err == nil {
			err = n.sched.add(h.name, eff.CronSpec(), eff.MisfireEnabled(), hostedRuns{n, h})
		}
		if err != nil {
			_ = cj.Leave(ctx)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil && n.stopping {
		// Stop began while joining and did not see this job: undo.
		n.mu.Unlock()
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
		_ = n.sched.remove(uctx, h.name)
		_ = cj.Leave(uctx)
		ucancel()
		n.mu.Lock()
		err = ErrNodeStopped
	}
	if err != nil {
		delete(n.jobs, h.name)
		return fmt.Errorf("dataflow: AddJob %q: %w", h.name, err)
	}
	n.jobs[h.name] = h
	h.reporter = stats.NewReporter(h.counter, cj, cj.Config().ProcessCountInterval, n.logger)
	if n.metrics != nil {
		n.metrics.Track(h.name, h.counter)
	}
	select {
	case <-n.life.Started(): // set under mu by Start
		n.startReporterLocked(h)
	default:
	}
	cj.OnSignal(func(sig protocol.Signal) { n.onSignal(h, sig) })
	n.startWorkflow(ctx, h, cj.Config())
	added = true
	return nil
}

func (n *Node) startReporterLocked(h *hostedJob) {
	if h == nil {
		return // still joining; add starts it
	}
	if err := h.reporter.StartIn(n.reports); err != nil && !errors.Is(err, stats.ErrReporterStarted) {
		n.logger.Warn("dataflow: starting count reporter", "job", h.name, "err", err)
	}
}

// RemoveJob stops scheduling the job, waits for its run in progress
// (bounded by ctx: on timeout the run is cancelled and ctx.Err() returned
// after it ends), reports its last counts and leaves the cluster (its
// server node goes offline and the others reshard).
func (n *Node) RemoveJob(ctx context.Context, name string) error {
	n.mu.Lock()
	h := n.jobs[name]
	n.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: %q", ErrNoJob, name)
	}
	return n.detach(ctx, h, true)
}

// detach removes h from the Node; the first call does the work and later
// ones wait for it and return its result. With leave false h's coord job
// is left to the Registry's Close (Stop: every job leaves together).
func (n *Node) detach(ctx context.Context, h *hostedJob, leave bool) error {
	h.detachOnce.Do(func() {
		h.haltCancel()
		n.stopTimers(h)
		var errs []error
		if err := n.sched.remove(ctx, h.name); err != nil && !errors.Is(err, ErrNoJob) {
			errs = append(errs, err) // the run was cancelled and has returned
		}
		tctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			tctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
			defer cancel()
		}
		if err := h.reporter.Stop(tctx); err != nil {
			n.logger.Warn("dataflow: last count report", "job", h.name, "err", err)
		}
		if leave {
			if err := h.cj.Leave(tctx); err != nil {
				errs = append(errs, fmt.Errorf("leave: %w", err))
			}
		}
		if n.metrics != nil {
			n.metrics.Forget(h.name)
		}
		n.mu.Lock()
		if n.jobs[h.name] == h {
			delete(n.jobs, h.name)
		}
		n.mu.Unlock()
		h.detachErr = errors.Join(errs...)
	})
	if h.detachErr != nil {
		return fmt.Errorf("dataflow: remove job %q: %w", h.name, h.detachErr)
	}
	return nil
}

// TriggerLocal runs the job on this server only, now or right after its
// run in progress (one pending trigger; more are coalesced), over the items
// this server owns. It does not block for the run. It works before Start
// too (cron fires wait for Start). Errors: ErrNoJob, ErrNodeStopped. To
// run a job on every server use TriggerAll (coord.Admin.Trigger,
// `shardflow trigger`).
func (n *Node) TriggerLocal(name string) error {
	n.mu.Lock()
	h, stopping := n.jobs[name], n.stopping
	n.mu.Unlock()
	if stopping {
		// The scheduler refuses it too, once the stop's goroutine gets
		// to it; from the stop's first moment (Ready says stopping) on.
		return ErrNodeStopped
	}
	if h != nil {
		h.wf.noteTrigger(-1)
	}
	return n.sched.trigger(name, ReasonTrigger)
}

// TriggerAll runs the job now on every live server of it (a one-off run
// of a job with or without a cron), as `shardflow trigger` does: it writes
// each live server's trigger node and returns; it does not wait for the
// runs. Errors: coord.ErrNoJob, or a store error.
func (n *Node) TriggerAll(ctx context.Context, name string) error {
	if err := coord.NewAdmin(n.st, n.Namespace()).Trigger(ctx, name); err != nil {
		return fmt.Errorf("dataflow: trigger %q on every server: %w", name, err)
	}
	return nil
}

// JobConfig returns the job's effective configuration (the stored one,
// with live edits applied), and false for a job not on this Node.
func (n *Node) JobConfig(name string) (JobConfig, bool) {
	n.mu.Lock()
	h := n.jobs[name]
	n.mu.Unlock()
	if h == nil {
		return JobConfig{}, false
	}
	return h.cj.Config(), true
}

// Jobs returns the names of the jobs on this Node, sorted.
func (n *Node) Jobs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.jobs))
	for name, h := range n.jobs {
		if h != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// NextFireTime returns the job's next cron fire time, zero for a job run
// only by triggers or an unknown job.
func (n *Node) NextFireTime(name string) time.Time {
	return n.sched.nextFire(name, time.Now())
}

// onSignal reacts to a signal of h's coord job. It is called by the job's
// coord watcher (protocol.Job.OnSignal, on the Registry's event loop), so it
// does not block: leaving the job, which waits for the watcher's step, runs
// in a goroutine of its own that Stop waits for.
func (n *Node) onSignal(h *hostedJob, sig protocol.Signal) {
	switch sig {
	case protocol.SignalConfigChanged:
		cfg := h.cj.Config()
		if err := n.sched.reschedule(h.name, cfg.CronSpec(), cfg.MisfireEnabled()); err != nil && !errors.Is(err, ErrNoJob) {
			n.reportError(h.name, fmt.Errorf("dataflow: apply stored config: %w", err))
		}
		h.reporter.SetInterval(cfg.ProcessCountInterval)
		n.armKick(h, cfg, 0)
	case protocol.SignalTrigger:
		h.wf.noteTrigger(h.cj.LastTrigger())
		if err := n.sched.trigger(h.name, ReasonTrigger); err != nil && !errors.Is(err, ErrNodeStopped) && !errors.Is(err, ErrNoJob) {
			n.reportError(h.name, err)
		}
	case protocol.SignalResharded:
		// Items that moved here may be owed by an open workflow step.
		n.armKick(h, h.cj.Config(), 0)
	case protocol.SignalFailover:
		// Claimed at once when idle, else right after the run.
		n.sched.failover(h.name)
	case protocol.SignalShutdown, protocol.SignalRemoved:
		n.mu.Lock()
		if n.stopping {
			// Stop detaches every job; it would wait for this one.
			n.mu.Unlock()
			return
		}
		n.detaching.Add(1)
		n.mu.Unlock()
		n.logger.Info("dataflow: job stopped by an operator", "job", h.name, "signal", int(sig))
		go func() {
			defer n.detaching.Done()
			ctx, cancel := context.WithTimeout(n.ctx, detachTimeout)
			defer cancel()
			if err := n.detach(ctx, h, true); err != nil {
				n.logger.Warn("dataflow: stopping job", "job", h.name, "err", err)
			}
		}()
	}
}

// reportRunError records an error a run goes on from (Shard.ReportError)
// as the server's lastError, and counts it in the metrics; nil clears it.
// The caller logs it.
func (n *Node) reportRunError(ctx context.Context, job string, run *protocol.Run, err error) {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	if err == nil {
		run.ReportError(ctx, "")
		return
	}
	run.ReportError(ctx, err.Error())
	if n.metrics != nil {
		n.metrics.ObserveReportedError(job)
	}
}

// reportTimeout bounds the lastError write of Shard.ReportError.
const reportTimeout = 5 * time.Second

func (n *Node) reportError(job string, err error) {
	if n.cfg.OnError != nil {
		n.cfg.OnError(job, err)
		return
	}
	n.logger.Error("dataflow: job error", "job", job, "err", err)
}

// isStopping reports whether the Node is stopping or h is being removed.
func (n *Node) isStopping(h *hostedJob) bool {
	return n.halt.Err() != nil || h.halt.Err() != nil
}

// hostedRuns is h as the scheduler runs it (jobRuns): the scheduler's
// followUp decides what runs after a run; these only answer its questions,
// and run nothing once the Node is stopping or h is being removed.
type hostedRuns struct {
	n *Node
	h *hostedJob
}

func (r hostedRuns) run(ctx context.Context, reason Reason, scheduled time.Time) {
	kick := reason == reasonKick
	if kick {
		reason = ReasonTrigger
	}
	if (reason == ReasonTrigger || reason == ReasonMisfire) && len(r.h.cj.Config().DependsOn) > 0 && !r.n.hasOpenStep(ctx, r.h) {
		// A job that runs after others runs in workflow runs only.
		return
	}
	if ctx.Err() == nil && !r.n.isStopping(r.h) {
		r.n.runOnce(ctx, r.h, reason, kick, scheduled)
	}
	if ctx.Err() == nil && !r.n.isStopping(r.h) {
		r.n.refreshFirstAhead(r.h) // after the run: off its path to BeforeRun
	}
}

func (r hostedRuns) takeMisfire(ctx context.Context) bool {
	if r.n.isStopping(r.h) {
		return false
	}
	again, err := r.h.cj.TakeMisfire(ctx)
	if err == nil && again {
		r.h.wf.mu.Lock()
		r.h.wf.catchUp = true
		r.h.wf.mu.Unlock()
	}
	return err == nil && again
}

func (r hostedRuns) claimFailover(ctx context.Context) bool {
	if r.n.isStopping(r.h) {
		return false
	}
	claimed, err := r.h.cj.ClaimFailover(ctx)
	return err == nil && claimed
}

// runOnce is one trigger, as data flows (ARCHITECTURE.md).
//
// kick: the run only looks for items this server owes the job's open
// workflow runs (it starts none). scheduled: the cron fire time it serves
// (RunInfo.ScheduledFire).
func (n *Node) runOnce(ctx context.Context, h *hostedJob, reason Reason, kick bool, scheduled time.Time) {
	started := time.Now()
	// Begin may wait (for the leader to reshard); a graceful stop or a
	// remove ends that wait, since nothing has started yet. Once Begin has
	// returned, only ctx (hard stop, ownership) cancels the run.
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A job in a workflow runs the items its workflow run still owes.
	// Only a fire starts a workflow run: not a failover run, nor a kick.
	fire, trigger := h.wf.fireOf(reason, kick)
	stop := context.AfterFunc(h.stopBegin, cancel)
	run, err := h.cj.Begin(bctx, started)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, protocol.ErrItemsRunning) && fire:
		h.wf.oweFire(trigger) // its catch-up run is this fire
		n.logger.Debug("dataflow: run skipped", "job", h.name, "reason", reason.String(), "err", err)
		return
	case errors.Is(err, protocol.ErrItemsRunning), errors.Is(err, protocol.ErrPaused), errors.Is(err, protocol.ErrShutdown):
		n.logger.Debug("dataflow: run skipped", "job", h.name, "reason", reason.String(), "err", err)
		return
	case bctx.Err() != nil:
		return
	default:
		n.reportError(h.name, fmt.Errorf("dataflow: begin run: %w", err))
		return
	}
	// The run's config snapshot, the one Begin computed its items with: an
	// edit during the run applies to the next one, whole.
	cfg := run.Config()
	assigned := run.Shards()
	wfRun, assigned, err := n.pickWorkflow(bctx, h, cfg, assigned, fire, trigger)
	if err != nil {
		n.reportError(h.name, fmt.Errorf("dataflow: workflow run: %w", err))
	}
	info := RunInfo{JobName: h.name, ServerID: n.reg.ServerID(), Reason: reason, ScheduledFire: scheduled, Started: started, Items: make([]int, len(assigned)), WorkflowRun: wfRun}
	shards := make([]Shard, len(assigned))
	for i, a := range assigned {
		item := a.Item
		info.Items[i] = item
		shards[i] = Shard{
			JobName: h.name, Item: item, Total: cfg.ShardingTotalCount,
			ItemParameter: run.ItemParameter(item), JobParameter: cfg.JobParameter,
			FetchCount: cfg.FetchDataCount, Epoch: a.Epoch, Failover: a.Failover,
			ServerID: info.ServerID, WorkflowRun: wfRun,
		}.WithFence(func(ctx context.Context) error { return run.CheckOwnership(ctx, item) }).
			WithReporter(func(ctx context.Context, err error) { n.reportRunError(ctx, h.name, run, err) })
		shards[i].handle = n.cfg.ErrorHandler
	}
	rctx, runSpan := startRunSpan(run.Context(), n.tracer, info)

	for _, l := range h.opts.listeners {
		n.callListener(h.name, "BeforeRun", func() { l.BeforeRun(rctx, info) })
	}
	for _, ol := range h.opts.once {
		if ol.BeforeAll != nil {
			if err := run.Once(rctx, "started", ol.StartedTimeout, ol.BeforeAll); err != nil {
				n.reportError(h.name, fmt.Errorf("dataflow: distribute-once BeforeAll: %w", err))
			}
		}
	}

	res := h.pipeline(rctx, shards, pipelineConfig{
		JobName:        h.name,
		Threads:        cfg.ConcurrentDataProcessThreadCount,
		Streaming:      cfg.StreamingProcess,
		PipelinedFetch: cfg.PipelinedFetch,
		KeepGoing:      func() bool { return run.KeepGoing() && !n.isStopping(h) },
		Counter:        h.counter,
		ErrorPolicy:    cfg.ErrorPolicy,
		Logger:         n.logger,
		ItemTimeout:    cfg.ItemTimeout,
		Tracer:         n.tracer,
	})
	// Read before Complete, which ends the run's context.
	cancelled := rctx.Err() != nil
	if res.Err != nil {
		n.reportError(h.name, res.Err)
	}

	for _, ol := range h.opts.once {
		if ol.AfterAll != nil {
			if err := run.Once(rctx, "completed", ol.CompletedTimeout, ol.AfterAll); err != nil {
				n.reportError(h.name, fmt.Errorf("dataflow: distribute-once AfterAll: %w", err))
			}
		}
	}

	cctx := n.completes.at(time.Now()) // completeTimeout, not ctx: it ends the items' running state
	// The run's outcome and the counts so far go with the completion, in
	// its one transaction: status shows a failing item, and the counts,
	// as soon as the run ends, not a report interval later.
	out := protocol.RunOutcome{Errors: itemErrors(rctx, res, cancelled, nil)}
	// The workflow run's record of its items before the completion: a
	// crash between the two re-runs nothing (the items' failover run
	// finds them completed in the workflow run).
	n.recordWorkflow(cctx, h, wfRun, run, assigned, cancelled, res)
	if s, f := h.counter.Drain(); s != 0 || f != 0 || len(assigned) > 0 {
		out.Counts = &protocol.CountReport{Success: s, Failure: f}
	}
	err = run.CompleteWith(cctx, n.sched.nextFire(h.name, time.Now()), out)
	if out.Counts != nil && !out.Counts.Written {
		h.counter.Restore(out.Counts.Success, out.Counts.Failure) // the next report carries them
	}
	if err != nil {
		err = fmt.Errorf("dataflow: complete run: %w", err)
		if rctx.Err() != nil {
			// Ownership was lost: the run was cancelled and its items
			// belong to someone else now.
			n.logger.Warn("dataflow: run cancelled, not completed", "job", h.name, "err", err)
		} else {
			n.reportError(h.name, err)
		}
		res.Err = errors.Join(res.Err, err)
		// History and metrics say why the items that went well are not
		// recorded as completed; the next Begin's record carries the
		// outcome to status.
		out.Errors = itemErrors(rctx, res, cancelled, err)
	}
	res.Started, res.Duration = started, time.Since(started)

	n.report(h, info, res, out.Errors)
	endSpan(runSpan, res.Success, res.Failure, res.Err)
	for _, l := range h.opts.listeners {
		n.callListener(h.name, "AfterRun", func() { l.AfterRun(rctx, info, res) })
	}
}

func (n *Node) callListener(job, what string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			n.reportError(job, &ItemError{Job: job, Item: -1, Op: "listener " + what, Err: newPanicError("listener "+what, v)})
		}
	}()
	f()
}

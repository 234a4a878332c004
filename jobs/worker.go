package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/startstop"
)

// retryDelay is the wait before watching the namespace again after a
// store error (a lost session, say); changes themselves arrive by watch.
const retryDelay = time.Second

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// AllowCommands are the command prefixes this worker may run (see
	// AllowList). Default none: every SCRIPT job is refused.
	AllowCommands []string
	// AllowURLs are the URL prefixes this worker may request (see
	// AllowList). Default none: every HTTP job is refused.
	AllowURLs []string
	// ScriptEnv names the variables of the worker's environment its
	// scripts get besides BaseScriptEnv and the SHARDFLOW_* run context
	// (CheckScriptEnv). Default none: scripts never see the worker's
	// credentials.
	ScriptEnv []string
	// SecretDir is the directory whose files a stored HTTP job's header may
	// name as ${file:NAME} (a mounted secret volume). Default "": file
	// references are refused. ${env:NAME} references read this process's
	// variables named SecretEnvPrefix+"*" only.
	SecretDir string
	// Logger receives the worker's events. Default slog.Default().
	Logger *slog.Logger
	// JobOptions are given to every job the worker adds to the Node
	// (listeners, say).
	JobOptions []dataflow.JobOption
}

// Worker runs every stored SCRIPT and HTTP job of its Node's namespace on
// the Node (`shardflow serve`, or a Node in user code opting in): a job
// stored with coord.Admin.CreateJob (`shardflow job add`) is joined within
// a store round trip of its creation, by a children watch on the
// namespace, and a removed one is dropped. A job whose command or URL the
// allow-lists do not permit, or whose stored config is invalid, is not
// joined, and the refusal is recorded in the job's status; it is looked at
// again only when the job is removed and added again. A join refused
// because this server id is registered by another live session (this
// worker's previous incarnation, killed and restarted before its session
// expired) is tried again every retryDelay.
//
// A job an operator shut down on this server (`shardflow shutdown`) stays
// off until the job is removed and added again or the worker restarts;
// `shardflow job remove` relies on that.
//
// Lifecycle: NewWorker, Start, Stop. One goroutine while started; Stop
// waits for it. A Worker runs once: a second Start, or a Start after Stop,
// starts nothing. Stop does not remove the jobs from the Node: Node.Stop
// does (stop the Worker first).
type Worker struct {
	n      *dataflow.Node
	cfg    WorkerConfig
	logger *slog.Logger
	admin  *coord.Admin
	run    *runner
	life   startstop.BaseStartStop

	mu      sync.Mutex
	known   map[string]int64 // job name -> Czxid of its node when last considered
	hosted  map[string]bool  // jobs this worker added to the Node
	changed chan struct{}    // closed and replaced after every pass over the namespace
	rejoin  bool             // a join was refused for a live server id: pass again after retryDelay
}

// NewWorker returns a Worker for n. It checks the allow-lists and starts
// nothing.
func NewWorker(n *dataflow.Node, cfg WorkerConfig) (*Worker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	allow, err := NewAllowList(cfg.AllowCommands, cfg.AllowURLs)
	if err != nil {
		return nil, err
	}
	if err := CheckScriptEnv(cfg.ScriptEnv); err != nil {
		return nil, err
	}
	run := newRunner(n, allow, secrets{dir: cfg.SecretDir}, cfg.Logger)
	run.scriptEnv = cfg.ScriptEnv
	return &Worker{
		n: n, cfg: cfg, logger: cfg.Logger,
		admin: coord.NewAdmin(n.Store(), n.Namespace()),
		run:   run,
		known: map[string]int64{}, hosted: map[string]bool{}, changed: make(chan struct{}),
	}, nil
}

// Start starts watching the namespace and returns at once; ctx is not
// retained (Stop ends the watch). A second Start, or a Start after Stop,
// is a no-op: a Worker runs once.
func (w *Worker) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.life.Go(context.Background(), w.loop) // false (started or stopped before): a no-op
	return nil
}

// Stop stops watching and waits for the watch goroutine (a job join in
// progress finishes first), bounded by ctx. Safe before Start (a later
// Start then starts nothing) and twice.
func (w *Worker) Stop(ctx context.Context) error {
	if err := w.life.StopContext(ctx); err != nil {
		return err
	}
	w.run.transport.CloseIdleConnections()
	return nil
}

// Jobs returns the stored jobs this worker runs, sorted.
func (w *Worker) Jobs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.hosted))
	for j := range w.hosted {
		out = append(out, j)
	}
	slices.Sort(out)
	return out
}

// Refused returns the jobs this worker refuses to run, with the reasons.
func (w *Worker) Refused() map[string]string { return w.run.refusals() }

// Changed returns a channel closed after the worker's next pass over the
// namespace (a test and tooling hook: wait on it instead of sleeping).
func (w *Worker) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *Worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		ch, err := w.pass(ctx)
		w.mu.Lock()
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errRejoin) {
				w.logger.Warn("jobs: watching the namespace; retrying", "namespace", w.n.Namespace(), "err", err)
			}
			t := time.NewTimer(retryDelay)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		select {
		case <-ctx.Done():
		case <-ch:
		}
	}
}

// pass reads the namespace's jobs with a watch, brings the hosted set in
// line with them, and returns the watch.
func (w *Worker) pass(ctx context.Context) (<-chan store.Event, error) {
	root := store.Join(w.n.Namespace())
	names, _, ch, err := w.n.Store().ChildrenW(ctx, root)
	if errors.Is(err, store.ErrNoNode) {
		var ok bool
		ok, _, ch, err = w.n.Store().ExistsW(ctx, root)
		if err == nil && ok {
			return nil, fmt.Errorf("jobs: %s appeared while watching it", root) // read again
		}
		return ch, err
	}
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	for _, name := range names {
		present[name] = true
		ok, stat, err := w.n.Store().Exists(ctx, store.Join(root, name))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		w.mu.Lock()
		prev, seen := w.known[name]
		w.mu.Unlock()
		if seen && prev == stat.Czxid {
			continue
		}
		if seen {
			w.drop(ctx, name) // removed and added again between two passes
		}
		w.mu.Lock()
		w.known[name] = stat.Czxid
		w.mu.Unlock()
		w.consider(ctx, name)
	}
	w.mu.Lock()
	var gone []string
	for name := range w.known {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	w.mu.Unlock()
	for _, name := range gone {
		w.drop(ctx, name)
	}
	w.mu.Lock()
	rejoin := w.rejoin
	w.rejoin = false
	w.mu.Unlock()
	if rejoin {
		return nil, errRejoin
	}
	return ch, nil
}

// errRejoin: a pass left a job to join again (its server id was still
// registered by a live session); the loop passes again after retryDelay.
var errRejoin = errors.New("jobs: a stored job's server id is held by another session; joining it again")

// consider joins a newly seen job if it is a stored job this worker may
// run, and records a refusal otherwise.
func (w *Worker) consider(ctx context.Context, name string) {
	data, _, err := w.n.Store().Get(ctx, store.Join(w.n.Namespace(), name, "config", jobconfig.FieldJobType))
	if err != nil {
		return // not a stored job (or not one yet: CreateJob writes it atomically)
	}
	if t, _ := jobconfig.ParseJobType(string(data)); !t.Stored() {
		return
	}
	err = checkDefinitionACL(ctx, w.n.Store(), w.n.Namespace(), name)
	var cfg jobconfig.Config
	if err == nil {
		cfg, err = w.admin.Config(ctx, name)
	}
	if err == nil {
		err = w.run.check(cfg)
	}
	if err != nil {
		w.run.setRefused(ctx, name, err.Error())
		return
	}
	cfg.Overwrite = false // the stored config is the job
	if err := dataflow.AddSimpleJob(ctx, w.n, cfg, w.run.run, w.cfg.JobOptions...); err != nil {
		if errors.Is(err, protocol.ErrServerIDInUse) {
			// Most likely this worker's previous incarnation, killed
			// and restarted at once: its session outlived the join's
			// wait (a store expires sessions a little after their
			// timeout). Join again at the next pass, until it is gone
			// or an operator sees the refusal and fixes a duplicate.
			w.mu.Lock()
			delete(w.known, name)
			w.rejoin = true
			w.mu.Unlock()
		}
		w.logger.Error("jobs: adding a stored job", "job", name, "err", err)
		w.run.setRefused(ctx, name, err.Error())
		return
	}
	w.run.setRefused(ctx, name, "")
	w.mu.Lock()
	w.hosted[name] = true
	w.mu.Unlock()
	w.logger.Info("jobs: running stored job", "job", name, "type", cfg.Type())
}

// drop removes a job that left the namespace from the Node.
func (w *Worker) drop(ctx context.Context, name string) {
	w.mu.Lock()
	hosted := w.hosted[name]
	delete(w.hosted, name)
	delete(w.known, name)
	w.mu.Unlock()
	w.run.forget(name)
	if !hosted {
		return
	}
	// The Node has usually left it already (it saw the job removed).
	if err := w.n.RemoveJob(ctx, name); err != nil && !errors.Is(err, dataflow.ErrNoJob) {
		w.logger.Warn("jobs: dropping a removed job", "job", name, "err", err)
	}
	w.logger.Info("jobs: stored job removed", "job", name)
}

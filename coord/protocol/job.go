package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/counts"
	"github.com/shardflow/shardflow/coord/protocol/internal/eventloop"
	"github.com/shardflow/shardflow/coord/protocol/internal/failing"
	"github.com/shardflow/shardflow/coord/protocol/internal/failover"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/leader"
	"github.com/shardflow/shardflow/coord/protocol/internal/registration"
	"github.com/shardflow/shardflow/coord/protocol/internal/runs"
	"github.com/shardflow/shardflow/coord/protocol/internal/signals"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/protocol/internal/unmonitored"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// Job is this server's handle on one job's protocol. Begin, Complete,
// TakeMisfire and ClaimFailover are called from one goroutine at a time (the
// Node runs one run per job at a time); the others are safe for concurrent
// use.
//
// A joined job's watcher (watcher.go: a state machine run by the
// Registry's event loop, internal/eventloop; started by startJob, stopped and awaited
// by leave) owns the tree cache's watches, the election, session handling,
// the operator-flag reactions, reconcile and the signals.
type Job struct {
	reg   *Registry
	st    store.Store
	p     layout.JobPaths
	jname string
	id    string
	log   *slog.Logger
	cache *treecache.Cache
	tx    txn.Committer   // writes intents (internal/txn)
	nodes *jobnodes.Nodes // reads the job's nodes (internal/jobnodes)

	errMu sync.Mutex // serialises lastError writes
	// mu guards what follows, and the leader's bookkeeping (ld). Lock
	// order: the leader's reshardMu, then mu.
	mu  sync.Mutex
	cfg jobconfig.Config
	// itemParams is cfg's shardingItemParameters, parsed when cfg was
	// decoded: a run takes both together (snapshot), never re-parsing.
	itemParams   map[int]string
	cfgErr       error
	cfgFields    map[string]string
	regSession   int64
	regCtx       context.Context
	regCancel    context.CancelFunc
	lostCh       chan struct{}
	suspended    bool
	leader       bool
	cachesOthers atomic.Bool // the cache keeps the others' sharding and flags (leader)
	offline      bool        // shut down by an operator
	removed      bool
	left         bool
	// lastTrigger: the Czxid of the last trigger node consumed.
	lastTrigger int64
	// shardSeen: the Mzxid of this server's sharding node the watcher
	// last signalled (SignalResharded); the watcher's only.
	shardSeen int64
	// fo: failover on this server (internal/failover): the claims and
	// the view of this server's items' claims, guarded by mu.
	fo *failover.Failover
	// rg: this server's registration (internal/registration).
	rg *registration.Registration
	// rn: what this process's runs hold (items, the live marker) and the
	// settling of what ended runs left (internal/runs), guarded by mu.
	rn *runs.Runs
	// debts: writes a cut connection kept from the store, owed to their
	// session (the barrier's, run records, completions).
	debts      recipe.Debts
	lastErrSet bool

	failing failing.Items // items whose last run failed (internal/failing)
	// quiet: the last Begin of an unmonitored run that wrote, which the
	// next ones with the same plan need not repeat (quiet.go); under mu.
	quiet unmonitored.Basis[Assignment]

	totals  *counts.Totals // cumulative counts (internal/counts)
	barrier phaseBarrier   // Once's barriers (once.go)

	// Watcher state.
	elec *recipe.Election // leader election (its candidate is the watcher's)
	wt   *watcher
	// joinResharded: the join's transaction resharded (lonejoin.go), just
	// before its election: the new leader's duties check the membership
	// against that reshard instead of raising the flag unconditionally.
	joinResharded bool
	// ld: the leader's duties (internal/leader), with their bookkeeping.
	ld *leader.Leader

	q   eventloop.Queue       // its place in the Registry's event loop
	fw  *eventloop.WatchFuncs // arms its watches, delivered to q
	sig signals.Box[Signal]
}

// startJob joins the job (Registry.Join): it registers this server, with
// the skeleton and the config when they are due, in one transaction
// (joiner), loads the tree cache, raises the resharding flag when the
// transaction did not, stands in the election and starts the watcher.
func startJob(ctx context.Context, r *Registry, lc localConfig) (*Job, error) {
	j := newJob(r, lc.cfg.JobName)
	joined := false
	defer func() {
		if !joined {
			// The watches armed so far end with it (their forwarders, on a
			// store without store.FuncWatcher).
			_ = j.q.Stop(context.Background())
		}
	}()
	// The watcher follows session changes from this snapshot on, so a
	// change during Join is never missed.
	sess, sessCh := j.st.Session()
	if sess.State != store.StateConnected {
		return nil, fmt.Errorf("coord: join job %q: store session is %s: %w", j.jname, sess.State, ErrSessionLost)
	}
	if err := r.ensureNamespace(ctx); err != nil {
		return nil, fmt.Errorf("coord: join job %q: %w", j.jname, err)
	}
	// The skeleton, the config when this join writes it, this server's
	// registration and election candidate: one transaction.
	jn := newJoiner(j, lc, sess.ID)
	jt, err := jn.transact(ctx)
	if err != nil {
		return nil, err
	}
	if err := jn.adoptConfig(ctx, jt); err != nil {
		return nil, j.abandonJoin(ctx, jt.registered, err)
	}
	if !jt.registered {
		if err := j.rg.RegisterServer(ctx, sess.ID, true); err != nil {
			return nil, err
		}
	}
	j.cachesOthers.Store(j.elec.HostHeld()) // leader by its transaction
	if err := jn.loadTree(ctx, jt); err != nil {
		_ = j.rg.Offline(context.WithoutCancel(ctx))
		return nil, err
	}
	j.regSession = sess.ID
	j.regCtx, j.regCancel = context.WithCancel(context.Background())
	j.lostCh = make(chan struct{})
	if err := jn.finish(ctx, jt); err != nil {
		j.regCancel()
		// Do not leave a live-looking registration behind.
		_ = j.rg.Offline(context.WithoutCancel(ctx))
		return nil, err
	}
	pred, err := jn.elect(ctx, jt)
	if err != nil {
		j.regCancel()
		_ = j.rg.Offline(context.WithoutCancel(ctx))
		return nil, err
	}
	joined = true
	j.wt.startWatcher(sessCh, pred)
	j.log.Debug("joined job")
	return j, nil
}

// newJob returns job name's handle of Registry r, before its join.
func newJob(r *Registry, name string) *Job {
	j := &Job{
		reg:   r,
		st:    r.st,
		p:     layout.NewJobPaths(r.cfg.Namespace, name),
		jname: name,
		id:    r.cfg.ServerID,
		log:   r.cfg.Logger.With("server", r.cfg.ServerID, "job", name),
	}
	j.wt = &watcher{j: j}
	j.wire()
	j.tx = txn.NewCommitter(j.st, j.p, j.cache)
	j.nodes = jobnodes.New(j.st, j.p, j.jname, j.cache)
	j.rg = registration.New(registration.Config{
		Store: j.st, Paths: j.p, Job: j.jname, Server: j.id, Log: j.log, Cache: j.cache,
		HostName: r.cfg.HostName, IDWait: r.cfg.ServerIDWait, IDSetting: r.serverIDSetting(),
		Mu: &j.mu, RecordLastError: j.recordLastError,
		Elec: j.elec, NotLeader: func() { j.mu.Lock(); j.leader = false; j.cachesOthers.Store(false); j.mu.Unlock() },
	})
	j.rn = runs.New(runs.Config{
		Store: j.st, Paths: j.p, Job: j.jname, Server: j.id, Log: j.log, Tx: j.tx, Debts: &j.debts,
		Mu: &j.mu, RegSessionLocked: func() int64 { return j.regSession }, Now: r.cfg.Now,
	})
	j.fo = failover.New(failover.Config{
		Store: j.st, Paths: j.p, Job: j.jname, Server: j.id, Log: j.log, Cache: j.cache, Tx: j.tx, Nodes: j.nodes,
		Mu: &j.mu, Signals: r.cfg.TestSignals,
		Hooks: failover.Hooks{
			Config: j.Config, Ready: j.ready, RegSessionLocked: func() int64 { return j.regSession }, Kick: j.kick, Warn: j.wt.warn,
		},
	})
	j.ld = leader.New(leader.Config{
		Store: j.st, Paths: j.p, Job: j.jname, Server: j.id, Log: j.log, Cache: j.cache, Tx: j.tx, Nodes: j.nodes,
		Mu: &j.mu, Signals: r.cfg.TestSignals, Now: r.cfg.Now, OfflineGrace: r.cfg.OfflineServerGrace,
		Hooks: leader.Hooks{
			Config: j.Config, IsLeader: j.isLeader, Ready: j.ready, MarkerLeftByEndedRun: j.rn.MarkerLeftByEndedRun,
			EnqueueOrphans: j.fo.EnqueueOrphans, Warn: j.wt.warn,
		},
	})
	j.barrier = phaseBarrier{st: j.st, p: j.p, id: j.id, jname: j.jname, log: j.log, debts: &j.debts}
	j.totals = counts.New(j.st, j.p, j.id, j.jname, j.log)
	return j
}

// wire builds the parts of a new job over its store: its event queue and
// signals, the arming of its watches, its election, its debts and its tree
// cache.
func (j *Job) wire() {
	j.q.Init(j.reg.loop, eventloop.Hooks{Step: j.wt.step, StopTimers: j.wt.stopTimers, SessionChanged: j.wt.cancelStaleRegistration})
	j.sig.Init(SignalResharded)
	j.fw = eventloop.NewWatchFuncs(j.st, &j.q)
	j.elec = recipe.NewElection(j.st, j.p.Abs(layout.RelElection), j.id)
	// The session may have resumed since an owed write failed, and the
	// watcher's step for that change run before the debt was kept: it
	// looks at the session again.
	j.debts.Kept = func() { j.q.Post(eventloop.Event{Kind: eventloop.Session}) }
	j.debts.Log = j.log
	j.cache = treecache.New(j.st, j.fw, j.p.Root, jobnodes.WatchPolicy(j.id, func(it int) bool { return j.fo.Claimed(it) }, j.cachesOthers.Load), j.postWatch, j.kick)
}

// joinResult is what a join's transaction did (joiner.transact).
type joinResult struct {
	// storedWins: a stored config was kept (not overwritten).
	storedWins bool
	// registered: the transaction registered this server too:
	// registerServer and setNecessary are done, and this server stands in
	// the election (first, and holding the host node, for a new job).
	registered bool
	// configWritten: the transaction wrote the config (the cache has not
	// read it yet).
	configWritten bool
	// flagPending: the transaction did not raise the resharding flag
	// (setNecessary is due).
	flagPending  bool
	registeredAt int64 // the zxid of the registration's transaction (0: unknown)
	// lone: the join stood alone and its transaction resharded
	// (lonejoin.go); nil otherwise.
	lone *loneResult
	// cfg is the config the job runs on after this join and cfgFields
	// the stored form it is: the local config's when the transaction
	// wrote it, the stored config (decoded by the plan) when it won.
	cfg       jobconfig.Config
	cfgFields map[string]string
	// preloaded: a stored job's join loaded the job node's listing, the
	// servers' listing and the failover directory into the cache before
	// its transaction (readForJoin); the load after it skips them.
	preloaded bool
	// ownSharding: this server's sharding node existed (readForJoin).
	ownSharding bool
	counts      counts.Joined // this server's counts, as planned
}

// joinReads is what a join of a stored job reads besides the config.
type joinReads struct {
	statusOwner  int64                // servers/{id}/status's session, 0: absent
	serverKids   []string             // servers/{id}'s children; nil: no such node
	ownCandidate string               // this session's election candidate, "" if none
	noCandidate  bool                 // no candidate stood at all
	run          registration.RunRead // servers/{id}/run, for LayoutOps
	flagUp       bool                 // the resharding flag exists
	// The servers listed and the membership version of the listing, for a
	// join that stands alone (lonejoin.go).
	servers        []string
	membersVersion int32
	serversListed  bool          // the servers node exists (servers may be empty)
	counts         counts.Joined // this server's counts (counts.Totals.Listed)
}

// readForJoin loads the config into the tree cache (when the job has a
// config node) and reads, side by side, what the registration needs;
// readTotals: the count totals even under the mark (counts.Totals.Listed).
func (jn *joiner) readForJoin(ctx context.Context, hasConfig, readTotals bool) (joinReads, error) {
	j := jn.j
	var rd joinReads
	g, gctx := errgroup.WithContext(ctx)
	if hasConfig {
		g.Go(func() error { return j.cache.LoadRoots(gctx, []string{layout.NConfig}) })
	}
	g.Go(func() error {
		kids, nst, err := j.st.Children(gctx, j.p.Server(j.id))
		if errors.Is(err, store.ErrNoNode) {
			rd.counts.Totals = &counts.Known{} // a server new to the job: no counts yet
			return nil
		}
		if err != nil {
			return wrapRead(j, j.p.Server(j.id), err)
		}
		if kids == nil {
			kids = []string{}
		}
		rd.serverKids = kids
		rd.counts, err = j.totals.Listed(gctx, kids, nst, readTotals)
		if err != nil || !slices.Contains(kids, layout.NStatus) {
			// No status node to own (a restart after a clean Stop); one
			// created after this listing fails the transaction's create.
			return err
		}
		ok, st, err := j.st.Exists(gctx, j.p.Server(j.id, layout.NStatus))
		if ok {
			rd.statusOwner = st.EphemeralOwner
			if rd.statusOwner == 0 {
				rd.statusOwner = -1 // a persistent node: never ours
			}
		}
		return wrapRead(j, j.p.Server(j.id, layout.NStatus), err)
	})
	g.Go(func() error {
		data, st, err := j.st.Get(gctx, j.p.Server(j.id, layout.NRun))
		if errors.Is(err, store.ErrNoNode) {
			return nil
		}
		rd.run = registration.RunRead{Found: err == nil, Data: data, Version: st.Version}
		return wrapRead(j, j.p.Server(j.id, layout.NRun), err)
	})
	g.Go(func() error {
		ok, _, err := j.st.Exists(gctx, j.p.Abs(layout.RelNecessary))
		rd.flagUp = ok
		return wrapRead(j, j.p.Abs(layout.RelNecessary), err)
	})
	// Loaded now rather than after the transaction, which does not change
	// them (the servers' listing, unless this server is new there; its
	// nodes load after it, joinServerRoots): a join that stands alone
	// plans on them (lonejoin.go).
	g.Go(func() error {
		names, st, err := j.cache.LoadShallow(gctx, layout.NServers)
		if errors.Is(err, store.ErrNoNode) {
			return nil
		}
		rd.servers, rd.membersVersion, rd.serversListed = names, st.Version, err == nil
		return wrapRead(j, j.p.Abs(layout.NServers), err)
	})
	g.Go(func() error { return j.cache.LoadRoots(gctx, []string{layout.RelFailoverQ}) })
	if j.reg.storedAtStart(j.jname) { // for a lone join's plan (a restart)
		g.Go(func() error { return j.cache.Load(gctx, layout.RelServer(j.id, layout.NDisabled)) })
	}
	g.Go(func() error {
		own, none, err := j.elec.Standing(gctx)
		if errors.Is(err, store.ErrNoNode) {
			return nil
		}
		rd.ownCandidate, rd.noCandidate = own, none
		return wrapRead(j, j.p.Abs(layout.RelLatch), err)
	})
	if err := g.Wait(); err != nil {
		return joinReads{}, err
	}
	j.failing.Seed(rd.run)
	return rd, nil
}

// joinAhead are the nodes below the roots that the join's transaction
// left in place for certain (its own writes), loaded beside the roots
// (treeCache.loadRootsAhead): this server's node, flags and sharding, and
// the host node it took.
func (jn *joiner) joinAhead(jt joinResult) []string {
	j := jn.j
	var ahead []string
	if !jt.preloaded { // the servers' listing loads with the roots
		ahead = append(ahead, layout.RelServer(j.id), layout.RelServer(j.id, layout.NDisabled))
	}
	if jt.lone != nil || jt.ownSharding {
		ahead = append(ahead, layout.RelServer(j.id, layout.NSharding))
	}
	if j.elec.HostHeld() {
		ahead = append(ahead, layout.RelHost)
	}
	return ahead
}

// joinServerRoots are the servers' nodes a join loads after its
// transaction, the servers' own listing loaded before it (readForJoin):
// the servers listed then, and this server's (its node may be new; the
// listing's watch, fired by its creation, finds it loaded).
func (jn *joiner) joinServerRoots() []string {
	j := jn.j
	names := j.cache.Children(layout.NServers)
	if !slices.Contains(names, j.id) {
		names = append(slices.Clone(names), j.id)
	}
	out := make([]string, len(names))
	for i, s := range names {
		out[i] = layout.NServers + "/" + s
	}
	return out
}

// wrapRead names the node of a failed read of a join.
func wrapRead(j *Job, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("coord: join job %q: read %s: %w", j.jname, path, err)
}

// abandonJoin undoes a registration the join transaction made (a new job
// whose config, read back, is refused) and returns err.
func (j *Job) abandonJoin(ctx context.Context, registered bool, err error) error {
	if registered {
		_ = j.rg.Offline(context.WithoutCancel(ctx))
	}
	return err
}

// warnStoredWins logs at Warn which fields of the local config lose to
// the stored one (docs/configuration.md promises it): a changed local
// config without Overwrite is otherwise ignored silently.
func (jn *joiner) warnStoredWins(local map[string]string, stored jobconfig.Config) {
	j := jn.j
	// Both with defaults filled in (local by prepareLocal, stored by its
	// decode), so a stored "0" (default) and a local explicit default are
	// not reported.
	want, have := local, stored.Fields()
	var differ []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if k != jobconfig.FieldOverwrite && want[k] != have[k] {
			differ = append(differ, fmt.Sprintf("%s: local %q, stored %q", k, want[k], have[k]))
		}
	}
	if len(differ) > 0 {
		j.log.Warn("the stored job config wins over this process's config (Overwrite is false); set Overwrite, or `shardflow config set`, to change it",
			"differing", strings.Join(differ, "; "))
	}
}

// setNecessary raises the resharding flag directly (raiseFlag): the cache
// may still show a flag that a reshard has just cleared. The cache learns
// of it from its watch (a write-through could race with the reshard's
// delete and leave a phantom flag).
func (j *Job) setNecessary(ctx context.Context) error {
	return layout.RaiseFlag(ctx, j.st, j.p)
}

// elect runs one step of the election (election.proceed): when this
// server becomes leader it takes up the leader's duties and returns 0;
// otherwise it returns the id of the watch (its event queued on the job as
// evPred) to elect again on. Only the watcher (and startJob) calls it.
func (j *Job) elect(ctx context.Context) (uint64, error) {
	var id uint64
	elected, waiting, err := j.elec.Proceed(ctx, j.fw.Exists(eventloop.Pred, &id))
	if err != nil {
		return 0, err
	}
	if !elected {
		if !waiting {
			id = 0
		}
		return id, nil
	}
	j.mu.Lock()
	was := j.leader
	j.leader = true
	j.mu.Unlock()
	if !was {
		j.log.Info("elected leader")
		j.cachesOthers.Store(true) // the other servers' nodes, for the duties
		if err := j.cache.LoadWanted(ctx); err != nil && ctx.Err() == nil {
			// A load cut by the job's end is its shutdown, not a finding
			// (TestShutdownIsQuiet: elected while leaving).
			j.log.Warn("cannot load the other servers' nodes into the tree cache", "err", err)
		}
		j.ld.Duties(ctx, !j.joinResharded) // raises the flag (unless FlagRaised or joinResharded)
		if s := j.reg.cfg.TestSignals; s != nil {
			s.Elected.Send(j.event())
		}
	}
	return 0, nil
}

// event names this job and server in a test signal.
func (j *Job) event() testsignal.Event { return testsignal.Event{Job: j.jname, Server: j.id} }

func (j *Job) isLeader() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.leader
}

// kick wakes the watcher (to load the stub nodes of the tree cache).
func (j *Job) kick() { j.q.Post(eventloop.Event{Kind: eventloop.Wake}) }

// postWatch queues a fired tree cache watch on the job.
func (j *Job) postWatch(ref treecache.WatchRef, ev store.Event) {
	j.q.Post(eventloop.Event{Kind: eventloop.Cache, Ref: ref, Ev: ev})
}

// Name returns the job name.
func (j *Job) Name() string { return j.jname }

// LastTrigger is the Czxid of the last operator trigger node this server
// consumed (SignalTrigger), 0 before the first: the trigger's place in the
// store's order, which a workflow's first job compares with its last
// workflow run's start (a trigger written before it is that run's, late).
func (j *Job) LastTrigger() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastTrigger
}

// Config returns the effective config as currently stored.
func (j *Job) Config() jobconfig.Config {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cfg
}

// itemParameters parses a validated config's item parameters (validation
// parsed them already, so this cannot fail).
func itemParameters(cfg jobconfig.Config) map[int]string {
	params, _ := jobconfig.ParseItemParameters(cfg.ShardingItemParameters, cfg.ShardingTotalCount)
	return params
}

// Lost returns a channel closed when this job's current registration is lost
// (session lost); Job re-registers by itself on the next session, after
// which Lost returns a new channel.
func (j *Job) Lost() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lostCh
}

// registration returns the current registration's session and context.
func (j *Job) registration() (int64, context.Context) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.regSession, j.regCtx
}

// loseRegistration cancels runs and closes Lost; watcher only.
func (j *Job) loseRegistration(why string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.regCtx.Err() == nil {
		j.log.Warn("registration lost; runs cancelled", "reason", why)
		j.regCancel()
		close(j.lostCh)
	}
	j.leader = false
	j.cachesOthers.Store(false)
	j.elec.Forget()
	j.fo.ForgetLocked()
}

// Leave unregisters this server from the job (its server node goes offline,
// resharding is flagged) and closes Signals.
func (j *Job) Leave(ctx context.Context) error {
	online, err := j.leaveLocal(ctx)
	if err != nil || !online {
		return err
	}
	return j.rg.Offline(ctx)
}

// leaveLocal is a leave up to its store writes: the watcher stopped and
// awaited, the registration cancelled, the job forgotten by the Registry,
// the writes owed to the session (completions among them) made. It reports whether the job's session is
// still the live one (its ephemerals remain: goOffline is due).
func (j *Job) leaveLocal(ctx context.Context) (online bool, _ error) {
	j.mu.Lock()
	if j.left {
		j.mu.Unlock()
		return false, nil
	}
	j.left = true
	j.mu.Unlock()
	if err := j.q.Stop(ctx); err != nil {
		j.sig.Close()
		return false, fmt.Errorf("coord: leave job %q: waiting for the watcher: %w", j.jname, err)
	}
	j.sig.Close()
	j.mu.Lock()
	j.regCancel()
	live := j.regSession
	j.mu.Unlock()
	j.reg.forget(j.jname, j)
	sess, _ := j.st.Session()
	if sess.State != store.StateConnected || sess.ID != live {
		return false, nil // our ephemerals are gone with the session
	}
	// Completions owed since the session was suspended are written before
	// going offline: the watcher that would have written them on the
	// resume is stopped, and the running nodes, gone with the session,
	// would make the runs look crashed (failed over again: simulation
	// seed 52).
	_ = j.debts.Pay(ctx, sess) // a failure is logged: nothing pays it after the leave
	// Claims no run has taken go back to the queue at once: held, they
	// would keep their items from every server until this session ends.
	j.fo.ReleaseClaims(ctx)
	return true, nil
}

// recordLastError writes servers/{id}/lastError (empty text clears it).
// Writes are serialised, and a clear is skipped while the stored config is
// invalid, so a run that began on the old config cannot erase the report.
func (j *Job) recordLastError(ctx context.Context, msg string) {
	j.errMu.Lock()
	defer j.errMu.Unlock()
	j.mu.Lock()
	skip := msg == "" && j.cfgErr != nil
	j.mu.Unlock()
	if !skip {
		j.writeLastErrorLocked(ctx, msg)
	}
}

// writeLastErrorLocked writes lastError; errMu must be held.
func (j *Job) writeLastErrorLocked(ctx context.Context, msg string) {
	j.mu.Lock()
	set := j.lastErrSet
	j.lastErrSet = msg != ""
	j.mu.Unlock()
	if msg == "" && !set {
		return
	}
	p := j.p.Server(j.id, layout.NLastError)
	if _, err := j.st.Set(ctx, p, []byte(msg), store.AnyVersion); errors.Is(err, store.ErrNoNode) {
		_, err = j.st.Create(ctx, p, []byte(msg), store.Persistent)
		if err != nil && !errors.Is(err, store.ErrNodeExists) {
			j.log.Warn("cannot record lastError", "err", err)
		}
	} else if err != nil {
		j.log.Warn("cannot record lastError", "err", err)
	}
}

// ClaimFailover claims one waiting failover item if failover is on and the
// queue is not empty (under the failover latch; when another server holds
// it, it waits up to a second for its release). True means an item is now
// assigned to this server and the Node should run at once. Called from
// one goroutine at a time, as Begin (failover.Failover.Claim).
func (j *Job) ClaimFailover(ctx context.Context) (bool, error) { return j.fo.Claim(ctx) }

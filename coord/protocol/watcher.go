package protocol

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/eventloop"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// retryDelay is how soon the watcher retries a failed resync or
// re-registration while the session is connected.
const retryDelay = 200 * time.Millisecond

// watcherState is what the job's watcher keeps between its steps. Only
// the job's step (one at a time, on the Registry's event loop) and Join,
// before the loop starts the job, touch it.
type watcherState struct {
	interval time.Duration
	tick     *time.Timer // the reconcile tick (time.AfterFunc)
	// retry is the retry timer; retryID names the pending one (a stopped
	// timer's event may still arrive), retryPending says one is due.
	retry        *time.Timer
	retryID      uint64
	retryPending bool
	needResync   bool
	electAgain   bool
	// pred names the election's watch waited on (0: none); idle the watch
	// on the live marker that keeps the leader from resharding promptly
	// (leader.ReshardWhenIdle; 0: none). Events of other ids are stale.
	pred, idle uint64
	// predAfterSession is the watch of the election a re-registration ran
	// (onSession), taken by takeElection when reelected.
	predAfterSession uint64
	reelected        bool // onSession ran the election; predAfterSession is its watch
	resynced         bool // onSession rebuilt the tree cache
	// reactFailed: react's prompt resharding failed on a connected
	// session; the watcher retries it after retryDelay.
	reactFailed bool
}

// watcher is a joined job's watcher: a state machine run by the
// Registry's event loop (internal/eventloop), one step at a time, that
// owns the tree cache's watches, the election, session handling, the
// operator-flag reactions, reconcile and the signals. It owns its state
// (watcherState); the job's state it shares it reads and writes under the
// job's mu, as the Job's methods do.
type watcher struct {
	j *Job
	watcherState
}

// startWatcher hands the joined job to the Registry's event loop: the
// reconcile tick starts, and the loop runs its first reaction and every
// event from now on (sessCh: Join's session snapshot; pred: the watch of
// Join's election).
func (w *watcher) startWatcher(sessCh <-chan struct{}, pred uint64) {
	j := w.j
	w.pred = pred
	w.interval = w.reconcileInterval()
	w.tick = time.AfterFunc(w.interval, func() { j.q.Post(eventloop.Event{Kind: eventloop.Tick}) })
	j.q.Start(sessCh)
}

// stopTimers stops the tick and the retry; the loop calls it once no step
// runs and none will.
func (w *watcher) stopTimers() {
	if w.tick != nil {
		w.tick.Stop()
	}
	if w.retry != nil {
		w.retry.Stop()
	}
}

// setRetry (re)arms the retry timer; a pending one is replaced.
func (w *watcher) setRetry() {
	j := w.j
	if w.retry != nil {
		w.retry.Stop()
	}
	w.retryID = eventloop.NewWatchID()
	id := w.retryID
	w.retryPending = true
	w.retry = time.AfterFunc(retryDelay, func() { j.q.Post(eventloop.Event{Kind: eventloop.Retry, ID: id}) })
}

// step is one turn of the job's watcher, run by the Registry's event loop
// (never two at once for a job): it handles the queued events in order,
// reacts once if any of them asks for it, and delivers the pending
// signals. Its store calls are bounded by ctx, which Leave cancels.
//
// The watcher re-arms the tree cache's watches, follows the session, runs
// the election and the leader's duties, reacts to operator flags and config
// edits, and delivers Signals.
func (w *watcher) step(ctx context.Context, evs []eventloop.Event) {
	j := w.j
	react := false
	for _, e := range evs {
		if ctx.Err() != nil {
			return
		}
		if w.handleEvent(ctx, e) {
			react = true
		}
	}
	if react && ctx.Err() == nil {
		w.react(ctx)
		if w.reactFailed && !w.retryPending {
			// A leader duty failed on a connected session: go again soon
			// (evRetry reacts), not at the next event, which may never
			// come on a trigger-only job.
			w.setRetry()
		}
		w.reactFailed = false
	}
	j.sig.Deliver()
}

// handleEvent handles one event; true asks for a reaction (react).
func (w *watcher) handleEvent(ctx context.Context, e eventloop.Event) bool {
	j := w.j
	switch e.Kind {
	case eventloop.Start:
		return true
	case eventloop.Deliver:
		return false
	case eventloop.Session:
		return w.handleSession(ctx)
	case eventloop.Tick:
		if iv := w.reconcileInterval(); iv != w.interval {
			w.interval = iv
		}
		w.tick.Reset(w.interval)
		if j.isLeader() {
			j.ld.Reconcile(ctx)
		}
		return true
	case eventloop.Pred:
		if e.ID != w.pred {
			return false // a watch replaced since
		}
		w.pred = 0
		id, err := w.electIfRegistered(ctx)
		if err != nil {
			w.warn(ctx, "leader election failed; retrying", "err", err)
			w.setRetry()
			w.electAgain = true
		}
		w.pred = id
		return true
	case eventloop.Retry:
		if !w.retryPending || e.ID != w.retryID {
			return false // replaced since
		}
		return w.handleRetry(ctx)
	case eventloop.Idle:
		if e.ID != w.idle {
			return false
		}
		w.idle = 0 // the running item it watched ended: react re-checks
		return true
	case eventloop.Wake:
		if err := j.cache.LoadStubs(ctx); err != nil {
			w.needResync, w.resynced = true, false // see handleCacheEvent
			w.setRetry()
			return false
		}
		return true
	case eventloop.Cache:
		return w.handleCacheEvent(ctx, e)
	}
	return false
}

// handleSession handles a session change (evSession).
func (w *watcher) handleSession(ctx context.Context) bool {
	j := w.j
	sess, _ := j.st.Session()
	j.log.Debug("session changed", "id", sess.ID, "state", sess.State)
	if w.onSession(ctx, sess) != nil {
		w.setRetry()
		return false
	}
	resyncedNow := false
	if w.resynced {
		w.needResync, w.resynced = false, false
	} else if w.needResync && sess.State == store.StateConnected {
		// A watch failed to re-arm while the connection was down; the
		// session resumed but the watch is still missing: resync now,
		// as promptly as the resumed session delivers the events of the
		// watches it kept. A retry after retryDelay left the triggers
		// of that delay on the stale cache (ZooKeeper simulation seeds
		// 993076: a config edit; 991089: a resharding flag).
		if err := j.cache.Resync(ctx); err != nil {
			w.warn(ctx, "tree cache resync after a resumed session failed; retrying", "err", err)
			w.setRetry()
			return false
		}
		j.log.Debug("tree cache resynced: a watch failed to re-arm while the connection was down")
		w.needResync, resyncedNow = false, true
	}
	w.takeElection()
	// Connected again (the same session resumed, or a new one
	// registered): react on the cache as it stands. What the leader's
	// duties tried on the connection that dropped (its prompt
	// resharding) failed with it, and a resumed session brings no
	// watch event to redo it: the others' Begins waited for the
	// leader's next trigger (ZooKeeper simulation seed 800010).
	return sess.State == store.StateConnected && (!w.retryPending || resyncedNow)
}

// handleRetry handles the retry timer (evRetry): recovery, and the
// election again if it failed.
func (w *watcher) handleRetry(ctx context.Context) bool {
	w.retryPending = false
	resynced, err := w.retryRecovery(ctx, w.needResync)
	if err != nil {
		w.warn(ctx, "recovery failed; retrying", "err", err)
		w.setRetry()
		return false
	}
	// Only a resync clears the need for one: a session that came back
	// after retryRecovery found it suspended has had none (its
	// session event, queued meanwhile, resyncs).
	if resynced || w.resynced {
		w.needResync, w.resynced = false, false
	}
	if w.electAgain && w.pred == 0 {
		// The election failed (say, on a dropped connection) and no
		// re-registration ran it since: run it again, or this server
		// never leads nor watches its predecessor.
		id, err := w.electIfRegistered(ctx)
		if err != nil {
			w.warn(ctx, "leader election failed; retrying", "err", err)
			w.setRetry()
			return false
		}
		w.pred = id
	}
	w.electAgain = false
	return true
}

// handleCacheEvent hands a watch's event to the tree cache (evCache).
func (w *watcher) handleCacheEvent(ctx context.Context, e eventloop.Event) bool {
	j := w.j
	if err := j.cache.Handle(ctx, e.Ref, e.Ev); err != nil {
		if ctx.Err() != nil {
			return false
		}
		// A resync made before this failure (a re-registration's, whose
		// step then failed) covers none of it: the resync is owed again
		// (Postgres simulation seed 3600166: the suspension's session
		// event took the earlier one for it, and the resumed session never
		// reloaded the config).
		w.needResync, w.resynced = true, false
		if !errors.Is(err, treecache.ErrResyncNeeded) {
			// Its watch is not armed again: nothing tells the cache of
			// the node's next changes until a resync.
			j.log.Debug("tree cache: re-reading a watched node failed; resyncing when connected", "node", e.Ref.Rel, "err", err)
			w.setRetry()
		}
	}
	return !w.needResync
}

// warn logs a failure of the watcher's work at Warn, or at Debug when ctx
// has ended: the watcher is being stopped (Leave, Registry.Close) and the
// cancelled call is not a failure to report.
func (w *watcher) warn(ctx context.Context, msg string, args ...any) {
	j := w.j
	if ctx.Err() != nil {
		j.log.Debug(msg+" (job stopping)", args...)
		return
	}
	j.log.Warn(msg, args...)
}

// electIfRegistered runs the election if this server is registered on the
// current session and not shut down; it returns the id of the watch to
// elect again on (0: none).
func (w *watcher) electIfRegistered(ctx context.Context) (uint64, error) {
	j := w.j
	sess, _ := j.st.Session()
	j.mu.Lock()
	ok := !j.offline && !j.removed && j.regCtx.Err() == nil && sess.ID == j.regSession
	j.mu.Unlock()
	if !ok {
		return 0, nil
	}
	return j.elect(ctx)
}

// takeElection replaces the watched predecessor with the watch of the
// election a re-registration ran, if one did. A suspension or a resumed
// session keeps the current watch: dropping it would leave this server
// waiting on nothing, never becoming leader when its predecessor goes.
func (w *watcher) takeElection() {
	if w.reelected {
		w.pred, w.predAfterSession, w.reelected = w.predAfterSession, 0, false
	}
}

// retryRecovery re-runs what failed: a resync and, if the session changed,
// the re-registration. It reports whether it resynced the cache itself
// (onSession's resync on a new session sets w.resynced).
func (w *watcher) retryRecovery(ctx context.Context, resync bool) (bool, error) {
	j := w.j
	sess, _ := j.st.Session()
	if err := w.onSession(ctx, sess); err != nil {
		return false, err
	}
	w.takeElection()
	if resync && sess.State == store.StateConnected {
		if err := j.cache.Resync(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// cancelStaleRegistration cancels the registration's runs and closes Lost
// when the current session shows the registration gone (lost, closed or
// replaced), as onSession's loseRegistration does first: the event loop's
// session follower calls it at every change, so that owned work stops
// without waiting for the job's step. The step does the rest. It makes no
// store call besides reading the session.
func (w *watcher) cancelStaleRegistration() {
	j := w.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.regCtx == nil || j.regCtx.Err() != nil {
		return
	}
	// Read under mu: a step re-registering on a new session sets
	// regSession under mu after registering on it.
	sess, _ := j.st.Session()
	if sess.State == store.StateLost || sess.State == store.StateClosed || sess.ID != j.regSession {
		j.log.Warn("registration lost; runs cancelled", "reason", layout.SessionProblem(sess, j.regSession))
		j.regCancel()
		close(j.lostCh)
	}
}

// onSession follows a session change: a lost or replaced session cancels
// the registration; a new connected session registers again (status,
// election, resharding flag) and resyncs the cache. It never gives up the
// job for good.
func (w *watcher) onSession(ctx context.Context, sess store.Session) error {
	j := w.j
	j.mu.Lock()
	reg := j.regSession
	j.suspended = sess.State == store.StateSuspended
	stopped := j.offline || j.removed
	j.mu.Unlock()
	w.predAfterSession = 0
	if sess.State == store.StateLost || sess.State == store.StateClosed || sess.ID != reg {
		j.loseRegistration(layout.SessionProblem(sess, reg))
	}
	_ = j.debts.Pay(ctx, sess) // a failure is logged and kept for the next change
	if sess.State != store.StateConnected || sess.ID == reg {
		// Not connected, or the same session resumed: its watches and
		// ephemerals were held, not dropped.
		return nil
	}
	if err := j.cache.Resync(ctx); err != nil {
		return err
	}
	w.resynced = true
	if stopped {
		j.mu.Lock()
		j.regSession = sess.ID
		j.mu.Unlock()
		return nil
	}
	if err := j.rg.RegisterServer(ctx, sess.ID, false); err != nil {
		return err
	}
	j.mu.Lock()
	j.regSession = sess.ID
	j.regCtx, j.regCancel = context.WithCancel(context.Background())
	j.lostCh = make(chan struct{})
	j.mu.Unlock()
	j.cache.NoteCreated(layout.RelServer(j.id, layout.NStatus))
	if err := j.setNecessary(ctx); err != nil {
		w.electOnRetry()
		return err
	}
	j.ld.FlagRaised = true
	pred, err := j.elect(ctx)
	j.ld.FlagRaised = false
	if err != nil {
		w.electOnRetry()
		return err
	}
	w.predAfterSession, w.reelected = pred, true
	j.log.Info("re-registered on a new session", "session", sess.ID)
	return nil
}

// electOnRetry marks the election owed after a re-registration failed
// past registering on the new session: the retry then runs it (evRetry),
// as the session already counts as registered and its resume re-runs
// nothing. The watch kept from the old session will never fire (ZooKeeper
// simulation seed 1600278: no leader, the resharding flag up for good).
func (w *watcher) electOnRetry() {
	w.electAgain, w.pred = true, 0
}

func (w *watcher) reconcileInterval() time.Duration {
	j := w.j
	if d := j.Config().ReconcileInterval; d > 0 {
		return d
	}
	return jobconfig.DefaultReconcileInterval
}

// react derives actions from the cache after a change: job removal,
// trigger, shutdown, config edits, the failover signal, and the leader's
// resharding flag on membership changes.
func (w *watcher) react(ctx context.Context) {
	j := w.j
	if j.cache.Incomplete() {
		// A resync failed midway: the missing nodes are not gone (the
		// job root least of all: the job would think itself removed for
		// good). React once the retried resync has loaded them.
		return
	}
	if !j.cache.Has("") {
		j.mu.Lock()
		was := j.removed
		j.removed = true
		if !was {
			j.regCancel()
		}
		j.mu.Unlock()
		if !was {
			j.log.Info("job removed from the namespace")
			j.sig.Emit(SignalRemoved)
		}
		return
	}
	w.reactRuns(ctx)
	if jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NShutdown)) {
		j.mu.Lock()
		was := j.offline
		j.offline = true
		if !was {
			j.regCancel()
		}
		j.mu.Unlock()
		if !was {
			j.log.Info("shut down by an operator")
			if err := j.rg.Offline(ctx); err != nil {
				w.warn(ctx, "going offline failed", "err", err)
			}
			j.sig.Emit(SignalShutdown)
		}
	}
	w.reactConfig(ctx)
	// Watch the execution nodes of the items this server now owns.
	if err := j.cache.RefreshItems(ctx); err != nil {
		w.warn(ctx, "cannot load owned items into the tree cache", "err", err)
	}
	cfg := j.Config()
	if cfg.Failover && layout.QueuedCount(j.cache.Children(layout.RelFailoverQ)) > 0 {
		j.sig.Emit(SignalFailover)
	}
	if j.isLeader() {
		j.ld.Duties(ctx, false)
		if w.idle == 0 {
			var id uint64
			waiting, err := j.ld.ReshardWhenIdle(ctx, j.fw.Exists(eventloop.Idle, &id))
			if err != nil {
				w.warn(ctx, "prompt resharding failed; retrying", "err", err)
				// Retried by the watcher while connected; after a drop,
				// when the session is back (either way before any Begin
				// needs to wait for it).
				if sess, _ := j.st.Session(); sess.State == store.StateConnected {
					w.reactFailed = true
				}
			}
			if waiting {
				w.idle = id
			}
		}
	}
	j.rg.LayoutGuardAhead(ctx) // reads servers new to it, off the next Begin's path
}

// reactRuns signals the runs the cache asks for: an operator's trigger
// (consumed) and a change of this server's items.
func (w *watcher) reactRuns(ctx context.Context) {
	j := w.j
	if j.cache.Has(layout.RelServer(j.id, layout.NTrigger)) {
		// Its Czxid (LastTrigger) places it among the workflow runs.
		_, tst, _ := j.st.Exists(ctx, j.p.Server(j.id, layout.NTrigger))
		if err := j.st.Delete(ctx, j.p.Server(j.id, layout.NTrigger), store.AnyVersion); err == nil || errors.Is(err, store.ErrNoNode) {
			j.cache.NoteDeleted(layout.RelServer(j.id, layout.NTrigger))
			j.mu.Lock()
			j.lastTrigger = max(j.lastTrigger, tst.Czxid)
			j.mu.Unlock()
			j.sig.Emit(SignalTrigger)
		}
	}
	if _, st, ok := j.cache.Get(layout.RelServer(j.id, layout.NSharding)); ok && st.Mzxid != j.shardSeen {
		j.shardSeen = st.Mzxid
		j.sig.Emit(SignalResharded)
	}
}

// reactConfig re-decodes the config when the cached fields changed.
func (w *watcher) reactConfig(ctx context.Context) {
	j := w.j
	fields := make(map[string]string)
	for _, n := range j.cache.Children(layout.NConfig) {
		if d, _, ok := j.cache.Get(layout.NConfig + "/" + n); ok {
			fields[n] = string(d)
		}
	}
	j.mu.Lock()
	same := maps.Equal(fields, j.cfgFields)
	j.mu.Unlock()
	if same || len(fields) == 0 {
		return
	}
	cfg, err := j.nodes.DecodeConfig(fields)
	if err != nil {
		j.log.Error("stored config is invalid; the job does not run until it is fixed", "err", err)
		// Report first, then refuse runs: whoever sees ErrBadConfig from
		// Begin finds the report in lastError.
		j.errMu.Lock()
		j.writeLastErrorLocked(ctx, err.Error())
		j.mu.Lock()
		j.cfgFields, j.cfgErr = fields, err
		j.mu.Unlock()
		j.errMu.Unlock()
	} else {
		j.mu.Lock()
		j.cfgFields, j.cfg, j.itemParams, j.cfgErr = fields, cfg, itemParameters(cfg), nil
		j.mu.Unlock()
		j.recordLastError(ctx, "")
	}
	j.sig.Emit(SignalConfigChanged)
	if s := j.reg.cfg.TestSignals; s != nil {
		s.ConfigApplied.Send(testsignal.ConfigApplied{Event: j.event(), Err: err})
	}
}

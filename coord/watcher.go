package coord

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// retryDelay is how soon the watcher retries a failed resync or
// re-registration while the session is connected.
const retryDelay = 200 * time.Millisecond

// Fixed select cases of the watcher loop; the cache's watches follow.
const (
	caseStop = iota
	caseSession
	caseWake
	caseTick
	casePred
	caseRetry
	caseSignal
	caseIdle
	nFixed
)

// watch is the job's single goroutine: it re-arms the cache's watches,
// follows the session, runs the election and the leader's duties, reacts to
// operator flags and config edits, and delivers Signals. It closes sigOut
// and watchDn when ctx ends.
func (j *job) watch(ctx context.Context, sessCh <-chan struct{}, predW <-chan store.Event) {
	defer close(j.watchDn)
	defer close(j.sigOut)
	var sess store.Session
	interval := j.reconcileInterval()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var retry <-chan time.Time
	needResync := false
	electAgain := false
	var refs []watchRef
	cases := make([]reflect.SelectCase, nFixed)
	j.react(ctx)
	for {
		j.deliverSignals()
		refs = j.cache.watches(refs[:0])
		cases = cases[:nFixed]
		cases[caseStop] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
		cases[caseSession] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sessCh)}
		cases[caseWake] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(j.wake)}
		cases[caseTick] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ticker.C)}
		cases[casePred] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(predW)}
		cases[caseRetry] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(retry)}
		if s, ok := j.nextSignal(); ok {
			cases[caseSignal] = reflect.SelectCase{Dir: reflect.SelectSend, Chan: reflect.ValueOf(j.sigOut), Send: reflect.ValueOf(s)}
		} else {
			cases[caseSignal] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf((<-chan struct{})(nil))}
		}
		cases[caseIdle] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(j.idleW)}
		for _, r := range refs {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.ch)})
		}
		chosen, recv, _ := reflect.Select(cases)
		switch chosen {
		case caseStop:
			return
		case caseSession:
			sess, sessCh = j.st.Session()
			j.log.Debug("session changed", "id", sess.ID, "state", sess.State)
			if j.onSession(ctx, sess) != nil {
				retry = time.After(retryDelay)
			} else {
				if j.resynced {
					needResync, j.resynced = false, false
				} else if needResync && sess.State == store.StateConnected && retry == nil {
					// A watch failed to re-arm while the connection was
					// down; the session resumed but the watch is still
					// missing: resync, or the cache stays blind to it.
					retry = time.After(retryDelay)
				}
				j.takeElection(&predW)
			}
			continue
		case caseSignal:
			s, _ := j.nextSignal()
			j.pending[s] = false
			continue
		case caseTick:
			if iv := j.reconcileInterval(); iv != interval {
				interval = iv
				ticker.Reset(iv)
			}
			if j.isLeader() {
				j.reconcile(ctx)
			}
		case casePred:
			predW = nil
			w, err := j.electIfRegistered(ctx)
			if err != nil {
				j.warn(ctx, "leader election failed; retrying", "err", err)
				retry = time.After(retryDelay)
				electAgain = true
			}
			predW = w
		case caseRetry:
			retry = nil
			if err := j.retryRecovery(ctx, &predW, needResync); err != nil {
				j.warn(ctx, "recovery failed; retrying", "err", err)
				retry = time.After(retryDelay)
				continue
			}
			if cur, _ := j.st.Session(); cur.State == store.StateConnected {
				needResync = false // retryRecovery resynced (it does only when connected)
			}
			if electAgain && predW == nil {
				// The election failed (say, on a dropped connection) and
				// no re-registration ran it since: run it again, or this
				// server never leads nor watches its predecessor.
				w, err := j.electIfRegistered(ctx)
				if err != nil {
					j.warn(ctx, "leader election failed; retrying", "err", err)
					retry = time.After(retryDelay)
					continue
				}
				predW = w
			}
			electAgain = false
		case caseIdle:
			j.idleW = nil // the running item it watched ended: react re-checks
		case caseWake:
			if err := j.cache.loadStubs(ctx); err != nil {
				needResync = true
				retry = time.After(retryDelay)
				continue
			}
		default:
			// A trigger fires a burst of watches: handle the chosen one and
			// every other one already fired before selecting again, so a
			// burst costs O(watches) instead of O(watches^2).
			first := chosen - nFixed
			for i := range refs {
				var ev store.Event
				if i == first {
					ev = recv.Interface().(store.Event)
				} else {
					select {
					case ev = <-refs[i].ch:
					default:
						continue
					}
				}
				if err := j.handleWatch(ctx, refs[i], ev); err != nil {
					if ctx.Err() != nil {
						return
					}
					needResync = true
					if !errors.Is(err, errResyncNeeded) {
						retry = time.After(retryDelay)
					}
				}
			}
			if needResync {
				continue
			}
		}
		j.react(ctx)
	}
}

// warn logs a failure of the watcher's work at Warn, or at Debug when ctx
// has ended: the watcher is being stopped (Leave, Registry.Close) and the
// cancelled call is not a failure to report.
func (j *job) warn(ctx context.Context, msg string, args ...any) {
	if ctx.Err() != nil {
		j.log.Debug(msg+" (job stopping)", args...)
		return
	}
	j.log.Warn(msg, args...)
}

// handleWatch re-arms one fired cache watch.
func (j *job) handleWatch(ctx context.Context, ref watchRef, ev store.Event) error {
	return j.cache.handle(ctx, ref, ev)
}

// electIfRegistered runs the election if this server is registered on the
// current session and not shut down.
func (j *job) electIfRegistered(ctx context.Context) (<-chan store.Event, error) {
	sess, _ := j.st.Session()
	j.mu.Lock()
	ok := !j.offline && !j.removed && j.regCtx.Err() == nil && sess.ID == j.regSession
	j.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return j.elect(ctx)
}

// takeElection replaces *predW with the predecessor watch of the election
// a re-registration ran, if one did. A suspension or a resumed session
// keeps the current watch: dropping it would leave this server waiting on
// nothing, never becoming leader when its predecessor goes.
func (j *job) takeElection(predW *<-chan store.Event) {
	if j.reelected {
		*predW, j.predAfterSession, j.reelected = j.predAfterSession, nil, false
	}
}

// retryRecovery re-runs what failed: a resync and, if the session changed,
// the re-registration.
func (j *job) retryRecovery(ctx context.Context, predW *<-chan store.Event, resync bool) error {
	sess, _ := j.st.Session()
	if err := j.onSession(ctx, sess); err != nil {
		return err
	}
	j.takeElection(predW)
	if resync && sess.State == store.StateConnected {
		return j.cache.resync(ctx)
	}
	return nil
}

// onSession follows a session change: a lost or replaced session cancels
// the registration; a new connected session registers again (status,
// election, resharding flag) and resyncs the cache. It never gives up the
// job for good.
func (j *job) onSession(ctx context.Context, sess store.Session) error {
	j.mu.Lock()
	reg := j.regSession
	j.suspended = sess.State == store.StateSuspended
	stopped := j.offline || j.removed
	j.mu.Unlock()
	j.predAfterSession = nil
	if sess.State == store.StateLost || sess.State == store.StateClosed || sess.ID != reg {
		j.loseRegistration(sessionProblem(sess, reg))
	}
	j.completeParked(ctx, sess)
	if sess.State != store.StateConnected || sess.ID == reg {
		// Not connected, or the same session resumed: its watches and
		// ephemerals were held, not dropped.
		return nil
	}
	if err := j.cache.resync(ctx); err != nil {
		return err
	}
	j.resynced = true
	if stopped {
		j.mu.Lock()
		j.regSession = sess.ID
		j.mu.Unlock()
		return nil
	}
	if err := j.registerServer(ctx, sess.ID, false); err != nil {
		return err
	}
	j.mu.Lock()
	j.regSession = sess.ID
	j.regCtx, j.regCancel = context.WithCancel(context.Background())
	j.lostCh = make(chan struct{})
	j.mu.Unlock()
	j.cache.noteCreated(relServer(j.id, nStatus))
	if err := j.setNecessary(ctx); err != nil {
		return err
	}
	w, err := j.elect(ctx)
	if err != nil {
		return err
	}
	j.predAfterSession, j.reelected = w, true
	j.log.Info("re-registered on a new session", "session", sess.ID)
	return nil
}

func (j *job) reconcileInterval() time.Duration {
	s := j.config().ReconcileIntervalSeconds
	if s <= 0 {
		s = 60
	}
	return time.Duration(s) * time.Second
}

// react derives actions from the cache after a change: job removal,
// trigger, shutdown, config edits, the failover signal, and the leader's
// resharding flag on membership changes.
func (j *job) react(ctx context.Context) {
	if !j.cache.has("") {
		j.mu.Lock()
		was := j.removed
		j.removed = true
		if !was {
			j.regCancel()
		}
		j.mu.Unlock()
		if !was {
			j.log.Info("job removed from the namespace")
			j.emit(SignalRemoved)
		}
		return
	}
	if j.cache.has(relServer(j.id, nTrigger)) {
		if err := j.st.Delete(ctx, j.p.server(j.id, nTrigger), store.AnyVersion); err == nil || errors.Is(err, store.ErrNoNode) {
			j.cache.noteDeleted(relServer(j.id, nTrigger))
			j.emit(SignalTrigger)
		}
	}
	if j.cache.flag(relServer(j.id, nShutdown)) {
		j.mu.Lock()
		was := j.offline
		j.offline = true
		if !was {
			j.regCancel()
		}
		j.mu.Unlock()
		if !was {
			j.log.Info("shut down by an operator")
			if err := j.goOffline(ctx); err != nil {
				j.warn(ctx, "going offline failed", "err", err)
			}
			j.emit(SignalShutdown)
		}
	}
	j.reactConfig(ctx)
	// Watch the execution nodes of the items this server now owns.
	if err := j.cache.refreshItems(ctx); err != nil {
		j.warn(ctx, "cannot load owned items into the tree cache", "err", err)
	}
	cfg := j.config()
	if cfg.Failover && len(j.cache.children(relFailoverQ)) > 0 {
		j.emit(SignalFailover)
	}
	if j.isLeader() {
		j.leaderDuties(ctx, false)
		if j.idleW == nil {
			w, err := j.reshardWhenIdle(ctx)
			if err != nil {
				j.warn(ctx, "prompt resharding failed; the next Begin reshards", "err", err)
			}
			j.idleW = w
		}
	}
}

// reactConfig re-decodes the config when the cached fields changed.
func (j *job) reactConfig(ctx context.Context) {
	fields := make(map[string]string)
	for _, n := range j.cache.children(nConfig) {
		if d, _, ok := j.cache.get(nConfig + "/" + n); ok {
			fields[n] = string(d)
		}
	}
	j.mu.Lock()
	same := maps.Equal(fields, j.cfgFields)
	j.mu.Unlock()
	if same || len(fields) == 0 {
		return
	}
	cfg, err := j.decodeConfig(fields)
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
	j.emit(SignalConfigChanged)
	if s := j.reg.cfg.TestSignals; s != nil {
		s.ConfigApplied.Send(testsignal.ConfigApplied{Event: j.event(), Err: err})
	}
}

// leaderDuties raises the resharding flag when the set of live servers
// (joined, departed, disabled or shut down) or the total differs from what
// the last reshard used, and requeues a dead server's unfinished items for
// failover.
//
// The failover scan runs on every departure the cache shows (a server
// without a status node that was not so at the last check), not only when
// the flag goes up: a server can join, be sharded by the leader's Begin
// (which reads the servers directly), run and die before this watcher
// first sees it, so the cache's live set never changes; and a reshard that
// read the servers after a crash leaves nothing to raise. The scan reads
// the store directly and queues each item once, so running it more often
// costs reads, never a duplicate.
func (j *job) leaderDuties(ctx context.Context, force bool) {
	live := j.liveServers()
	departed := j.newlyDeparted()
	total := j.config().ShardingTotalCount
	j.reshardMu.Lock()
	raised := j.raiseIfMembershipChanged(ctx, live, total, force)
	j.reshardMu.Unlock()
	if raised || departed {
		j.enqueueOrphans(ctx)
	}
}

// newlyDeparted records the servers the cache shows without a status node
// and reports whether one of them was not so at the previous call.
func (j *job) newlyDeparted() bool {
	var gone []string
	for _, s := range j.cache.children(nServers) {
		if !cachedServerState(j.cache, s).online {
			gone = append(gone, s)
		}
	}
	news := false
	for _, s := range gone {
		if !slices.Contains(j.departed, s) {
			news = true
			break
		}
	}
	j.departed = gone
	return news
}

// raiseIfMembershipChanged raises the resharding flag when live or total
// differ from what the watcher saw last and from what the last reshard
// used. The caller holds reshardMu.
//
// Arrivals count as well as departures: a joining server raises the flag
// itself, but when the flag is already up (say, from its own departure
// after a lost session) its join changes nothing in the store, and a
// reshard that read the servers just before the join would clear the flag
// without it. Holding reshardMu, this check runs after such a reshard and
// sees that it used a membership without the newcomer.
func (j *job) raiseIfMembershipChanged(ctx context.Context, live []string, total int, force bool) bool {
	cur := strings.Join(live, ",")
	j.mu.Lock()
	last, lastTotal, sharded := j.lastLive, j.lastTotal, j.shardedLive
	j.lastLive, j.lastTotal = cur, total
	j.mu.Unlock()
	if !force && sharded == cur+"/"+strconv.Itoa(total) {
		// The last reshard (which reads the servers directly) already
		// used exactly this membership: a change seen late here.
		return false
	}
	// A cache view that differs from the last reshard's counts as a change
	// even when the cache itself saw none: a server the reshard used may
	// have died before the cache ever saw it live.
	changed := last != "" && (last != cur || total != lastTotal) ||
		sharded != "" && sharded != cur+"/"+strconv.Itoa(total)
	if !force && !changed {
		return false
	}
	if !force {
		// The cache told of a change; the decision rests on a direct read,
		// as the reshard's own: a cache that has not yet seen a join the
		// last reshard used would otherwise raise a spurious flag, which
		// holds every Begin until the runs begun meanwhile complete.
		_, direct, err := j.readServers(ctx)
		if err != nil {
			j.warn(ctx, "cannot read the servers to confirm a membership change; raising the resharding flag", "err", err)
		} else if sharded == strings.Join(direct, ",")+"/"+strconv.Itoa(total) {
			return false
		}
	}
	if err := j.setNecessary(ctx); err != nil {
		j.warn(ctx, "cannot raise the resharding flag", "err", err)
	}
	return true
}

// owners maps each item to the server whose sharding node lists it.
func (j *job) owners() map[int]string {
	own := make(map[int]string)
	for _, s := range j.cache.children(nServers) {
		d, _, ok := j.cache.get(relServer(s, nSharding))
		if !ok {
			continue
		}
		items, err := parseItems(d)
		if err != nil {
			continue
		}
		for _, it := range items {
			own[it] = s
		}
	}
	return own
}

// reconcile is the leader's periodic check: an item owned by an offline or
// disabled server, or by no one, raises the resharding flag; offline server
// nodes older than the grace are pruned (operator-disabled ones are kept).
func (j *job) reconcile(ctx context.Context) {
	cfg := j.config()
	live := j.liveServers()
	if len(live) > 0 {
		own := j.owners()
		for it := range cfg.ShardingTotalCount {
			s, ok := own[it]
			if !ok || !slices.Contains(live, s) {
				j.log.Info("reconcile: item has no live owner; resharding", "item", it, "owner", s)
				if err := j.setNecessary(ctx); err != nil {
					j.warn(ctx, "cannot raise the resharding flag", "err", err)
				}
				break
			}
		}
	}
	now := j.reg.cfg.Now()
	for _, s := range j.cache.children(nServers) {
		if cachedServerState(j.cache, s).online {
			delete(j.offlineSeen, s)
			continue
		}
		since, ok := j.offlineSeen[s]
		if !ok {
			j.offlineSeen[s] = now
			continue
		}
		if now.Sub(since) < j.reg.cfg.OfflineServerGrace {
			continue
		}
		if d, _, ok := j.cache.get(relServer(s, nDisabled)); ok && flagTrue(d) {
			continue
		}
		j.log.Info("pruning offline server", "offline-server", s, "since", since)
		if err := store.DeleteAll(ctx, j.st, j.p.server(s)); err != nil {
			j.warn(ctx, "cannot prune offline server", "offline-server", s, "err", err)
			continue
		}
		delete(j.offlineSeen, s)
	}
	j.enqueueOrphans(ctx)
}

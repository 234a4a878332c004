package coord

import (
	"context"
	"errors"
	"maps"
	"reflect"
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
			if sess.State != store.StateConnected || retry != nil {
				continue
			}
			// Connected again (the same session resumed, or a new one
			// registered): react on the cache as it stands. What the
			// leader's duties tried on the connection that dropped (its
			// prompt resharding) failed with it, and a resumed session
			// brings no watch event to redo it: the others' Begins waited
			// for the leader's next trigger (ZooKeeper simulation seed
			// 800010).
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
		if j.reactFailed && retry == nil {
			// A leader duty failed on a connected session: go again soon
			// (caseRetry reacts), not at the next event, which may never
			// come on a trigger-only job.
			retry = time.After(retryDelay)
		}
		j.reactFailed = false
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
	if j.cache.incomplete() {
		// A resync failed midway: the missing nodes are not gone (the
		// job root least of all: the job would think itself removed for
		// good). React once the retried resync has loaded them.
		return
	}
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
				j.warn(ctx, "prompt resharding failed; retrying", "err", err)
				// Retried by the watcher while connected; after a drop,
				// when the session is back (either way before any Begin
				// needs to wait for it).
				if sess, _ := j.st.Session(); sess.State == store.StateConnected {
					j.reactFailed = true
				}
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

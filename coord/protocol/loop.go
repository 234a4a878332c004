package protocol

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// loopWorkers bounds the goroutines of a Registry's event loop that run
// jobs' steps at once. They exist only while jobs have events: an idle
// Registry has the loop's session follower and nothing else. A step may
// wait on store calls (a connection down), so one slow job holds one
// worker, not the loop.
const loopWorkers = 16

// eventLoop runs the watchers of a Registry's jobs. A job's watcher is a
// state machine (watcher.go): its events (a watch fired, the session
// changed, a wake-up, the reconcile tick, a retry, an item that stopped
// running) are queued on the job, and a bounded pool of workers runs the
// jobs that have events, one step per job at a time, in the order they
// became ready. Watches are delivered by function (store.FuncWatcher), and
// timers are time.AfterFunc, so an idle job costs no goroutine.
//
// One goroutine per Registry follows the store session while jobs are
// joined and queues a session event on each of them at every change.
type eventLoop struct {
	st store.Store

	// mu guards what follows and every job's q. Store watch functions take
	// it with the store's lock held: never call the store with mu held.
	mu      sync.Mutex
	jobs    map[*Job]struct{} // started and not stopped
	ready   []*Job            // jobs with events, waiting for a worker
	workers int
	// stopFollow ends the session follower; wg counts the follower and
	// the workers of the current period of activity (from the first job
	// started to the last one stopped).
	stopFollow chan struct{}
	wg         *sync.WaitGroup
}

func newEventLoop(st store.Store) *eventLoop {
	return &eventLoop{st: st, jobs: make(map[*Job]struct{})}
}

// evKind is the kind of a job's event.
type evKind uint8

const (
	evStart    evKind    = iota // the watcher starts: react once
	evSession                   // the store session changed
	evWake                      // kick: load the stub nodes
	evTick                      // the reconcile interval elapsed
	evDeliver                   // deliver pending signals (OnSignal)
	evCache                     // a tree cache watch fired
	evPred                      // the election's watch fired
	evIdle                      // the watched running item changed (reshardWhenIdle)
	evRetry                     // the retry timer fired
	nCoalesced = evCache        // kinds below are queued at most once
)

// loopEvent is one queued event of a job.
type loopEvent struct {
	kind evKind
	id   uint64             // evPred, evIdle, evRetry: which watch or timer
	ref  treecache.WatchRef // evCache
	ev   store.Event
}

// jobQueue is a job's place in the loop; guarded by eventLoop.mu, except
// ctx and cancel (set at creation) and done.
type jobQueue struct {
	pend      []loopEvent
	has       [nCoalesced]bool
	started   bool // in the loop's jobs: events get scheduled
	scheduled bool // in ready or running
	running   bool
	stopped   bool
	stepDone  chan struct{} // closed when the running step ends (set by stop)

	ctx    context.Context // the watcher's: cancelled by stop
	cancel context.CancelFunc
	// done is closed by stop; it ends the watch forwarders of a store
	// without store.FuncWatcher (watchFuncs), counted by fwd.
	done chan struct{}
	fwd  sync.WaitGroup
}

func (q *jobQueue) init() {
	q.ctx, q.cancel = context.WithCancel(context.Background())
	q.done = make(chan struct{})
}

// post queues e on j. It never blocks for long (it only takes the loop's
// lock), so store watch functions and timers call it.
func (l *eventLoop) post(j *Job, e loopEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.postLocked(j, e)
}

func (l *eventLoop) postLocked(j *Job, e loopEvent) {
	q := &j.q
	if q.stopped {
		return
	}
	if e.kind < nCoalesced {
		if q.has[e.kind] {
			return
		}
		q.has[e.kind] = true
	}
	q.pend = append(q.pend, e)
	if q.started && !q.scheduled {
		l.scheduleLocked(j)
	}
}

func (l *eventLoop) scheduleLocked(j *Job) {
	j.q.scheduled = true
	l.ready = append(l.ready, j)
	if l.workers < loopWorkers {
		l.workers++
		wg := l.wg
		wg.Add(1)
		go l.work(wg)
	}
}

// work runs ready jobs' steps until none is ready.
func (l *eventLoop) work(wg *sync.WaitGroup) {
	defer wg.Done()
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.ready) > 0 {
		j := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		q := &j.q
		if q.stopped {
			q.scheduled = false
			continue
		}
		evs := q.pend
		q.pend, q.has = nil, [nCoalesced]bool{}
		q.running = true
		l.mu.Unlock()
		j.step(q.ctx, evs)
		l.mu.Lock()
		q.running = false
		switch {
		case q.stopped:
			q.scheduled = false
			j.stopTimers()
			if q.stepDone != nil {
				close(q.stepDone)
			}
		case len(q.pend) > 0:
			l.ready = append(l.ready, j) // behind the others: no job starves them
		default:
			q.scheduled = false
		}
	}
	l.workers--
}

// start makes j's events run: the events queued since its creation (the
// watches Join armed) and a first reaction. sessCh is the session channel
// Join's snapshot returned: a change since then is not missed.
func (l *eventLoop) start(j *Job, sessCh <-chan struct{}) {
	// Never call the store with mu held: its watch functions post, with
	// the store's own lock held.
	_, ch := l.st.Session()
	l.mu.Lock()
	if len(l.jobs) == 0 {
		l.wg = new(sync.WaitGroup)
		l.stopFollow = make(chan struct{})
		l.wg.Add(1)
		go l.follow(ch, l.stopFollow, l.wg)
	}
	l.jobs[j] = struct{}{}
	j.q.started = true
	l.postLocked(j, loopEvent{kind: evStart})
	l.mu.Unlock()
	select {
	case <-sessCh:
		l.post(j, loopEvent{kind: evSession})
	default:
	}
}

// follow queues a session event on every job at each session change.
func (l *eventLoop) follow(ch <-chan struct{}, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ch:
		case <-stop:
			return
		}
		_, ch = l.st.Session()
		l.mu.Lock()
		jobs := make([]*Job, 0, len(l.jobs))
		for j := range l.jobs {
			jobs = append(jobs, j)
			l.postLocked(j, loopEvent{kind: evSession})
		}
		l.mu.Unlock()
		// A lost session stops owned work at once, not when a worker gets
		// to each job's step (busy workers may be waiting on the
		// connection).
		for _, j := range jobs {
			j.cancelStaleRegistration()
		}
	}
}

// stop ends j's watcher: no step starts after it, the running one is
// cancelled and awaited (ctx bounds the wait), its timers are stopped and
// the watch forwarders end. When j was the last job, the follower and the
// workers are awaited too. Safe on a job never started (a failed Join).
func (l *eventLoop) stop(ctx context.Context, j *Job) error {
	q := &j.q
	q.cancel()
	l.mu.Lock()
	if q.stopped {
		l.mu.Unlock()
		return nil
	}
	q.stopped = true
	q.pend = nil
	var wait chan struct{}
	if q.running {
		// The worker stops the timers when the step ends (the step may
		// re-arm them).
		q.stepDone = make(chan struct{})
		wait = q.stepDone
	} else {
		j.stopTimers()
	}
	var (
		endWG  *sync.WaitGroup
		stopFl chan struct{}
	)
	if q.started {
		delete(l.jobs, j)
		if len(l.jobs) == 0 {
			endWG, stopFl = l.wg, l.stopFollow
			l.wg, l.stopFollow = nil, nil
		}
	}
	l.mu.Unlock()
	close(q.done)
	if stopFl != nil {
		close(stopFl)
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	q.fwd.Wait()
	if endWG != nil {
		endWG.Wait()
	}
	return nil
}

// watchFuncs arms a job's watches with their events queued on the job:
// through store.FuncWatcher, or, on a store without it (a test's
// decorator), through a goroutine per watch that forwards its channel's
// event until the job stops.
type watchFuncs struct {
	st store.Store
	fw store.FuncWatcher // nil: forward channels
	q  *jobQueue
}

func (w *watchFuncs) forward(ch <-chan store.Event, fn store.WatchFunc) {
	w.q.fwd.Add(1)
	go func() {
		defer w.q.fwd.Done()
		select {
		case ev := <-ch:
			fn(ev)
		case <-w.q.done:
		}
	}()
}

// GetWFunc, ExistsWFunc and ChildrenWFunc make watchFuncs a store.FuncWatcher
// (the tree cache arms its watches through it).
func (w *watchFuncs) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	if w.fw != nil {
		return w.fw.GetWFunc(ctx, path, fn)
	}
	data, st, ch, err := w.st.GetW(ctx, path)
	if err == nil {
		w.forward(ch, fn)
	}
	return data, st, err
}

func (w *watchFuncs) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	if w.fw != nil {
		return w.fw.ExistsWFunc(ctx, path, fn)
	}
	ok, st, ch, err := w.st.ExistsW(ctx, path)
	if err == nil {
		w.forward(ch, fn)
	}
	return ok, st, err
}

func (w *watchFuncs) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
	if w.fw != nil {
		return w.fw.ChildrenWFunc(ctx, path, fn)
	}
	names, st, ch, err := w.st.ChildrenW(ctx, path)
	if err == nil {
		w.forward(ch, fn)
	}
	return names, st, err
}

// watchIDs numbers watches and timers (0: none), process-wide.
var watchIDs atomic.Uint64

func newWatchID() uint64 { return watchIDs.Add(1) }

// loopExists is a recipe.ExistsWatch whose event is queued on j as kind, with the
// id of the last watch armed kept in *id.
func (j *Job) loopExists(kind evKind, id *uint64) recipe.ExistsWatch {
	return func(ctx context.Context, path string) (bool, store.Stat, error) {
		n := newWatchID()
		ok, stat, err := j.fw.ExistsWFunc(ctx, path, func(ev store.Event) {
			j.reg.loop.post(j, loopEvent{kind: kind, id: n, ev: ev})
		})
		if err == nil {
			*id = n
		}
		return ok, stat, err
	}
}

// Package eventloop runs the watchers of a Registry's jobs: each job's
// events (a watch fired, the session changed, a wake-up, the reconcile
// tick, a retry) are queued on its Queue, and a bounded pool of workers,
// which exist only while jobs have events, runs each job's step on them,
// one step per job at a time. Watches are delivered by function
// (store.FuncWatcher, or a forwarding goroutine per watch on a store
// without it, WatchFuncs), timers are time.AfterFunc: an idle job costs no
// goroutine.
package eventloop

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

// Loop runs the watchers of a Registry's jobs. A job's watcher is a
// state machine (coord/protocol/watcher.go): its events (a watch fired, the session
// changed, a wake-up, the reconcile tick, a retry, an item that stopped
// running) are queued on the job, and a bounded pool of workers runs the
// jobs that have events, one step per job at a time, in the order they
// became ready. Watches are delivered by function (store.FuncWatcher), and
// timers are time.AfterFunc, so an idle job costs no goroutine.
//
// One goroutine per Registry follows the store session while jobs are
// joined and queues a session event on each of them at every change.
type Loop struct {
	st store.Store

	// mu guards what follows and every job's q. Store watch functions take
	// it with the store's lock held: never call the store with mu held.
	mu      sync.Mutex
	jobs    map[*Queue]struct{} // started and not stopped
	ready   []*Queue            // jobs with events, waiting for a worker
	workers int
	// stopFollow ends the session follower; wg counts the follower and
	// the workers of the current period of activity (from the first job
	// started to the last one stopped).
	stopFollow chan struct{}
	wg         *sync.WaitGroup
}

// New returns the loop of the jobs on st (a Registry's).
func New(st store.Store) *Loop {
	return &Loop{st: st, jobs: make(map[*Queue]struct{})}
}

// Kind is the kind of a job's event.
type Kind uint8

const (
	Start      Kind    = iota // the watcher starts: react once
	Session                   // the store session changed
	Wake                      // kick: load the stub nodes
	Tick                      // the reconcile interval elapsed
	Deliver                   // deliver pending signals (OnSignal)
	Cache                     // a tree cache watch fired
	Pred                      // the election's watch fired
	Idle                      // the watched running item changed (reshardWhenIdle)
	Retry                     // the retry timer fired
	nCoalesced = Cache        // kinds below are queued at most once
)

// Event is one queued event of a job.
type Event struct {
	Kind Kind
	ID   uint64             // Pred, Idle, Retry: which watch or timer
	Ref  treecache.WatchRef // Cache
	Ev   store.Event
}

// Hooks are a job's part in the loop, each called by the loop alone.
type Hooks struct {
	// Step runs the job's watcher on its queued events (never two at once
	// for a job); ctx is cancelled by Stop.
	Step func(ctx context.Context, evs []Event)
	// StopTimers stops the job's timers, once no step runs and none will.
	StopTimers func()
	// SessionChanged is called by the session follower at every session
	// change, beside the Session event it queues, without waiting for a
	// worker: a lost session stops owned work at once.
	SessionChanged func()
}

// Queue is a job's place in the loop; guarded by Loop.mu, except
// loop, hooks, ctx and cancel (set by Init) and done.
type Queue struct {
	loop      *Loop
	hooks     Hooks
	pend      []Event
	has       [nCoalesced]bool
	started   bool // in the loop's jobs: events get scheduled
	scheduled bool // in ready or running
	running   bool
	stopped   bool
	stepDone  chan struct{} // closed when the running step ends (set by stop)

	ctx    context.Context // the watcher's: cancelled by stop
	cancel context.CancelFunc
	// done is closed by stop; it ends the watch forwarders of a store
	// without store.FuncWatcher (WatchFuncs), counted by fwd.
	done chan struct{}
	fwd  sync.WaitGroup
}

// Init makes q a job's queue in loop l, run by hooks; before any other use.
func (q *Queue) Init(l *Loop, hooks Hooks) {
	q.loop, q.hooks = l, hooks
	q.ctx, q.cancel = context.WithCancel(context.Background())
	q.done = make(chan struct{})
}

// Post queues e on q. It never blocks for long (it only takes the loop's
// lock), so store watch functions and timers call it.
func (q *Queue) Post(e Event) {
	l := q.loop
	l.mu.Lock()
	defer l.mu.Unlock()
	l.postLocked(q, e)
}

func (l *Loop) postLocked(q *Queue, e Event) {
	if q.stopped {
		return
	}
	if e.Kind < nCoalesced {
		if q.has[e.Kind] {
			return
		}
		q.has[e.Kind] = true
	}
	q.pend = append(q.pend, e)
	if q.started && !q.scheduled {
		l.scheduleLocked(q)
	}
}

func (l *Loop) scheduleLocked(q *Queue) {
	q.scheduled = true
	l.ready = append(l.ready, q)
	if l.workers < loopWorkers {
		l.workers++
		wg := l.wg
		wg.Add(1)
		go l.work(wg)
	}
}

// work runs ready jobs' steps until none is ready.
func (l *Loop) work(wg *sync.WaitGroup) {
	defer wg.Done()
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.ready) > 0 {
		q := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		if q.stopped {
			q.scheduled = false
			continue
		}
		evs := q.pend
		q.pend, q.has = nil, [nCoalesced]bool{}
		q.running = true
		l.mu.Unlock()
		q.hooks.Step(q.ctx, evs)
		l.mu.Lock()
		q.running = false
		switch {
		case q.stopped:
			q.scheduled = false
			q.hooks.StopTimers()
			if q.stepDone != nil {
				close(q.stepDone)
			}
		case len(q.pend) > 0:
			l.ready = append(l.ready, q) // behind the others: no job starves them
		default:
			q.scheduled = false
		}
	}
	l.workers--
}

// Start makes q's events run: the events queued since its creation (the
// watches Join armed) and a first reaction (a Start event). sessCh is the
// session channel Join's snapshot returned: a change since then is not
// missed.
func (q *Queue) Start(sessCh <-chan struct{}) {
	l := q.loop
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
	l.jobs[q] = struct{}{}
	q.started = true
	l.postLocked(q, Event{Kind: Start})
	l.mu.Unlock()
	select {
	case <-sessCh:
		q.Post(Event{Kind: Session})
	default:
	}
}

// follow queues a session event on every job at each session change.
func (l *Loop) follow(ch <-chan struct{}, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ch:
		case <-stop:
			return
		}
		_, ch = l.st.Session()
		l.mu.Lock()
		jobs := make([]*Queue, 0, len(l.jobs))
		for q := range l.jobs {
			jobs = append(jobs, q)
			l.postLocked(q, Event{Kind: Session})
		}
		l.mu.Unlock()
		// A lost session stops owned work at once, not when a worker gets
		// to each job's step (busy workers may be waiting on the
		// connection).
		for _, q := range jobs {
			q.hooks.SessionChanged()
		}
	}
}

// Stop ends q's watcher: no step starts after it, the running one is
// cancelled and awaited (ctx bounds the wait), its timers are stopped and
// the watch forwarders end. When q was the last job, the follower and the
// workers are awaited too. Safe on a job never started (a failed Join).
func (q *Queue) Stop(ctx context.Context) error {
	l := q.loop
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
		q.hooks.StopTimers()
	}
	var (
		endWG  *sync.WaitGroup
		stopFl chan struct{}
	)
	if q.started {
		delete(l.jobs, q)
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

// WatchFuncs arms a job's watches with their events queued on the job:
// through store.FuncWatcher, or, on a store without it (a test's
// decorator), through a goroutine per watch that forwards its channel's
// event until the job stops.
type WatchFuncs struct {
	st store.Store
	fw store.FuncWatcher // nil: forward channels
	q  *Queue
}

// NewWatchFuncs returns the watch arming of the job queued on q, over st.
func NewWatchFuncs(st store.Store, q *Queue) *WatchFuncs {
	return &WatchFuncs{st: st, fw: store.FuncWatcherOf(st), q: q}
}

func (w *WatchFuncs) forward(ch <-chan store.Event, fn store.WatchFunc) {
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

// GetWFunc, ExistsWFunc and ChildrenWFunc make WatchFuncs a store.FuncWatcher
// (the tree cache arms its watches through it).
func (w *WatchFuncs) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	if w.fw != nil {
		return w.fw.GetWFunc(ctx, path, fn)
	}
	data, st, ch, err := w.st.GetW(ctx, path)
	if err == nil {
		w.forward(ch, fn)
	}
	return data, st, err
}

// ExistsWFunc is store.FuncWatcher's ExistsWFunc (see GetWFunc).
func (w *WatchFuncs) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	if w.fw != nil {
		return w.fw.ExistsWFunc(ctx, path, fn)
	}
	ok, st, ch, err := w.st.ExistsW(ctx, path)
	if err == nil {
		w.forward(ch, fn)
	}
	return ok, st, err
}

// ChildrenWFunc is store.FuncWatcher's ChildrenWFunc (see GetWFunc).
func (w *WatchFuncs) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
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

// NewWatchID returns a new watch or timer id.
func NewWatchID() uint64 { return watchIDs.Add(1) }

// Exists is a recipe.ExistsWatch whose event is queued on the job as kind,
// with the id of the last watch armed kept in *id.
func (w *WatchFuncs) Exists(kind Kind, id *uint64) recipe.ExistsWatch {
	return func(ctx context.Context, path string) (bool, store.Stat, error) {
		n := NewWatchID()
		ok, stat, err := w.ExistsWFunc(ctx, path, func(ev store.Event) {
			w.q.Post(Event{Kind: kind, ID: n, Ev: ev})
		})
		if err == nil {
			*id = n
		}
		return ok, stat, err
	}
}

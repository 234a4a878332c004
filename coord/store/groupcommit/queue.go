package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/store"
)

// Queue is the coalescing queue under every group commit of the stores:
// callers queue their requests, up to MaxInFlight flushers take them batch
// after batch and hand each batch to the commit function, which commits it
// as the store does (zkstore, memstore: one combined Multi, see Committer;
// pgstore: one statement of per-request savepoints) and replies to each
// request. The queue owns what does not depend on the commit: arrival
// order, the per-key isolation (Keys), the hold of the keys of a batch in
// flight, the bounds of a batch, and a caller leaving by its ctx (withdrawn
// while queued; returning at once, its batch going on, once taken).
//
// M is what a commit needs of a request besides its operations (pgstore:
// its session and its call's name; struct{} when nothing).
type Queue[M any] struct {
	commit      CommitFunc[M]
	keys        KeyFunc
	ctxErr      func(*Request[M]) error
	maxInFlight int
	maxOps      int
	maxBytes    int

	mu    sync.Mutex
	queue []*Request[M]
	// flushing counts the flushers running; held, the keys of the batches
	// in flight (a count per key); heldAlone, a request committed alone is
	// in flight.
	flushing  int
	held      map[string]int
	heldAlone bool
	flushers  sync.WaitGroup
	closed    bool // Wait was called
}

// CommitFunc commits a batch taken from a Queue and replies to each of its
// requests exactly once (Request.Reply), before it returns or later.
type CommitFunc[M any] func(batch []*Request[M])

// KeyFunc returns the keys of a request's operations, and whether it must
// be committed alone (it touches every key). Requests that share a key
// never share a batch, nor go while a batch holding that key is in flight,
// and keep their arrival order.
type KeyFunc func(ops []store.Op) (keys []string, alone bool)

// QueueConfig configures NewQueue.
type QueueConfig[M any] struct {
	// MaxInFlight bounds the batches being committed at once (default 1).
	MaxInFlight int
	// MaxOps and MaxBytes (store.MultiSize) bound a batch; one request of
	// any size always goes. 0: no bound.
	MaxOps, MaxBytes int
	// Keys isolates requests by key; nil: every request may share a batch
	// with any other (a commit that isolates them itself, as pgstore's
	// savepoints do).
	Keys KeyFunc
	// CtxErr is the error of a request whose ctx ended before its reply
	// (default: the ctx's error).
	CtxErr func(*Request[M]) error
}

// Request is one caller's transaction waiting in a Queue.
type Request[M any] struct {
	// Ctx is the caller's; Ops its operations; Meta what the commit
	// needs besides them.
	Ctx  context.Context
	Ops  []store.Op
	Meta M

	size  int      // store.MultiSize(Ops)
	keys  []string // distinct; nil when alone or without a KeyFunc
	alone bool     // the request touches every key
	done  chan reply
	// queued is guarded by Queue.mu: true until a batch takes it.
	queued bool
}

// reply is a request's outcome.
type reply struct {
	res []store.OpResult
	err error
}

// Reply hands the request its outcome; a commit calls it once a request.
func (r *Request[M]) Reply(res []store.OpResult, err error) { r.done <- reply{res: res, err: err} }

// NewQueue returns a Queue committing through commit.
func NewQueue[M any](commit CommitFunc[M], cfg QueueConfig[M]) *Queue[M] {
	q := &Queue[M]{commit: commit, keys: cfg.Keys, ctxErr: cfg.CtxErr, maxInFlight: max(cfg.MaxInFlight, 1),
		maxOps: cfg.MaxOps, maxBytes: cfg.MaxBytes, held: map[string]int{}}
	if q.ctxErr == nil {
		q.ctxErr = func(r *Request[M]) error { return r.Ctx.Err() }
	}
	return q
}

// Do queues ops and returns their outcome, or the ctx error once ctx ends
// (see Queue). After Wait, it commits ops at once as a batch of its own.
func (q *Queue[M]) Do(ctx context.Context, ops []store.Op, meta M) ([]store.OpResult, error) {
	r := &Request[M]{Ctx: ctx, Ops: ops, Meta: meta, size: store.MultiSize(ops), done: make(chan reply, 1), queued: true}
	if ctx.Err() != nil {
		return nil, q.ctxErr(r)
	}
	if q.keys != nil {
		r.keys, r.alone = q.keys(ops)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		r.queued = false
		q.commit([]*Request[M]{r})
		rep := <-r.done
		return rep.res, rep.err
	}
	q.queue = append(q.queue, r)
	start := q.flushing < q.maxInFlight
	if start {
		q.flushing++
		q.flushers.Add(1)
	}
	q.mu.Unlock()
	if start {
		go q.flushQueue()
	}
	select {
	case rep := <-r.done:
		return rep.res, rep.err
	case <-ctx.Done():
		q.withdraw(r)
		return nil, q.ctxErr(r)
	}
}

// Wait returns once no flusher runs: a store's Close calls it once its
// calls in flight end. Later requests are committed by their caller, so
// that no flusher starts while Wait waits.
func (q *Queue[M]) Wait() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.flushers.Wait()
}

// Pending reports how many batches are being committed and how many
// requests wait for the next, for tests.
func (q *Queue[M]) Pending() (flushing, queued int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flushing, len(q.queue)
}

// Live replies to the requests of batch whose ctx ended (CtxErr) and
// returns the others, which a commit sends.
func (q *Queue[M]) Live(batch []*Request[M]) []*Request[M] {
	live := batch[:0:0]
	for _, r := range batch {
		if r.Ctx.Err() != nil {
			r.Reply(nil, q.ctxErr(r))
			continue
		}
		live = append(live, r)
	}
	return live
}

// Fail replies err to each request of live, or CtxErr to one whose ctx
// ended: the outcome of a call that failed as a whole.
func (q *Queue[M]) Fail(live []*Request[M], err error) {
	for _, r := range live {
		if r.Ctx.Err() != nil {
			r.Reply(nil, q.ctxErr(r))
			continue
		}
		r.Reply(nil, err)
	}
}

// CallContext returns the context of the call that commits live: it ends
// once every request's ctx has ended (a lone request's own ctx), so that a
// caller who gives up cancels no one else's commit. stop releases it.
func CallContext[M any](live []*Request[M]) (ctx context.Context, stop func()) {
	if len(live) == 1 {
		return live[0].Ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int32
	left.Store(int32(len(live)))
	stops := make([]func() bool, 0, len(live))
	for _, r := range live {
		stops = append(stops, context.AfterFunc(r.Ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// withdraw removes r from the queue if no batch took it yet.
func (q *Queue[M]) withdraw(r *Request[M]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !r.queued {
		return
	}
	for i, x := range q.queue {
		if x == r {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			break
		}
	}
	r.queued = false
}

// flushQueue commits the queue batch after batch and ends when nothing in
// it can be taken: it is empty, or what is left waits for keys held by
// another flusher's batch, which takes it once that batch is done.
func (q *Queue[M]) flushQueue() {
	defer q.flushers.Done()
	var batch []*Request[M]
	for {
		q.mu.Lock()
		q.holdLocked(batch, -1)
		batch = q.takeLocked()
		if len(batch) == 0 {
			q.flushing--
			q.mu.Unlock()
			return
		}
		q.holdLocked(batch, 1)
		q.mu.Unlock()
		q.commit(batch)
	}
}

// holdLocked adds d to the hold of batch's keys. q.mu is held.
func (q *Queue[M]) holdLocked(batch []*Request[M], d int) {
	for _, r := range batch {
		if r.alone {
			q.heldAlone = d > 0
		}
		for _, k := range r.keys {
			if q.held[k] += d; q.held[k] <= 0 {
				delete(q.held, k)
			}
		}
	}
}

// takeLocked removes the next batch from the queue: in arrival order, the
// requests whose keys no request of the batch, nor of a batch in flight,
// nor an earlier request left in the queue, has (so that same-key requests
// keep their order), up to maxBytes and maxOps. A request to be committed
// alone goes alone, when no batch is in flight. q.mu is held.
func (q *Queue[M]) takeLocked() []*Request[M] {
	if q.heldAlone {
		return nil
	}
	var batch []*Request[M]
	taken := map[string]bool{}   // keys of the batch
	blocked := map[string]bool{} // keys of the requests left behind
	ops, size := 0, 0
	rest := q.queue[:0]
	full := false
	for i, r := range q.queue {
		if full {
			rest = append(rest, q.queue[i:]...)
			break
		}
		if r.alone {
			if len(batch) == 0 && len(q.held) == 0 {
				batch = append(batch, r)
				full = true
				continue
			}
			rest = append(rest, q.queue[i:]...)
			break // nothing after it may pass it: it touches every key
		}
		fits := len(batch) == 0 || (q.maxOps <= 0 || ops+len(r.Ops) <= q.maxOps) && (q.maxBytes <= 0 || size+r.size <= q.maxBytes)
		free := true
		for _, k := range r.keys {
			if taken[k] || blocked[k] || q.held[k] > 0 {
				free = false
				break
			}
		}
		if !fits || !free {
			for _, k := range r.keys {
				blocked[k] = true
			}
			rest = append(rest, r)
			continue
		}
		batch = append(batch, r)
		for _, k := range r.keys {
			taken[k] = true
		}
		ops, size = ops+len(r.Ops), size+r.size
	}
	// rest shares q.queue's array: clear the tail so that no request
	// stays referenced.
	clear(q.queue[len(rest):])
	q.queue = rest
	for _, r := range batch {
		r.queued = false
	}
	return batch
}

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
// A take costs O(batch x log queue), not O(queue): the queue keeps, per
// key, its queued requests in arrival order (its line) and whether a
// batch in flight holds it, and, in arrival order (a heap), only the
// requests that may go now (ready): first in each of their keys' lines,
// none of their keys held. A take pops them until the batch is full and
// never looks at a request that must wait. Queuing a request costs
// O(keys + log queue); withdrawing it, O(keys x line + log queue). (A take
// that scanned the whole queue made a tick of N queued requests cost
// O(N^2 / batch): 40% of a worker's CPU with 10,000 jobs firing together.)
//
// M is what a commit needs of a request besides its operations (pgstore:
// its session and its call's name; struct{} when nothing).
type Queue[M any] struct {
	commit      CommitFunc[M]
	keyFunc     KeyFunc
	ctxErr      func(*Request[M]) error
	maxInFlight int
	maxOps      int
	maxBytes    int

	mu sync.Mutex
	// ready holds the queued requests that may go now (blockers == 0), a
	// heap in arrival order (seq); queued counts every queued request.
	ready  []*Request[M]
	queued int
	seq    uint64
	// keys holds the state of every key a request queued or in flight
	// has; spare, states to reuse.
	keys  map[string]*keyState[M]
	spare []*keyState[M]
	// flushing counts the flushers running; heldKeys, the keys held by
	// batches in flight; heldAlone, a request committed alone is in flight.
	flushing  int
	heldKeys  int
	heldAlone bool
	flushers  sync.WaitGroup
	closed    bool // Wait was called
}

// keyState is one key's line: its queued requests in arrival order, and
// whether a batch in flight holds it. The key blocks each request of its
// line but the first, and the first too while held.
type keyState[M any] struct {
	key  string
	line []*Request[M] // line[head:] are queued; buf, its first array
	buf  [1]*Request[M]
	head int
	held bool
	// mark is the seq of the last request that named the key (its keys
	// are made distinct by it).
	mark uint64
}

// maxSpare bounds the key states a Queue keeps for reuse.
const maxSpare = 1024

// CommitFunc commits a batch taken from a Queue and replies to each of its
// requests exactly once (Request.Reply), before it returns or later. It
// must not keep batch itself once it returns: the queue reuses it.
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
	// any size always goes. The first request that would pass a bound
	// ends its batch and goes first in the next. 0: no bound.
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

	size  int  // store.MultiSize(Ops)
	alone bool // the request touches every key
	done  chan reply
	// Guarded by Queue.mu. queued: true until a batch takes it. keys: the
	// states of its distinct keys, while queued or in flight (nil when
	// alone or without a KeyFunc; ks1 holds a single one). seq: its
	// arrival. blockers: its keys that block it (keyState); at 0 it is in
	// Queue.ready, at index idx (-1: not there).
	queued   bool
	keys     []*keyState[M]
	ks1      [1]*keyState[M]
	seq      uint64
	blockers int
	idx      int
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
	q := &Queue[M]{commit: commit, keyFunc: cfg.Keys, ctxErr: cfg.CtxErr, maxInFlight: max(cfg.MaxInFlight, 1),
		maxOps: cfg.MaxOps, maxBytes: cfg.MaxBytes, keys: map[string]*keyState[M]{}}
	if q.ctxErr == nil {
		q.ctxErr = func(r *Request[M]) error { return r.Ctx.Err() }
	}
	return q
}

// Do queues ops and returns their outcome, or the ctx error once ctx ends
// (see Queue). After Wait, it commits ops at once as a batch of its own.
func (q *Queue[M]) Do(ctx context.Context, ops []store.Op, meta M) ([]store.OpResult, error) {
	r := &Request[M]{Ctx: ctx, Ops: ops, Meta: meta, size: store.MultiSize(ops), done: make(chan reply, 1), idx: -1}
	if ctx.Err() != nil {
		return nil, q.ctxErr(r)
	}
	var keys []string
	if q.keyFunc != nil {
		keys, r.alone = q.keyFunc(ops)
		if r.alone {
			keys = nil
		}
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.commit([]*Request[M]{r})
		rep := <-r.done
		return rep.res, rep.err
	}
	q.pushLocked(r, keys)
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
	return q.flushing, q.queued
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

// flushQueue commits the queue batch after batch and ends when nothing in
// it can be taken: it is empty, or what is left waits for keys held by
// another flusher's batch, which takes it once that batch is done.
func (q *Queue[M]) flushQueue() {
	defer q.flushers.Done()
	var batch []*Request[M]
	for {
		q.mu.Lock()
		q.releaseLocked(batch)
		clear(batch) // no request stays referenced by the reused array
		batch = q.takeLocked(batch[:0])
		if len(batch) == 0 {
			q.flushing--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.commit(batch)
	}
}

// pushLocked queues r, whose keys are keys (nil when alone). q.mu is held.
func (q *Queue[M]) pushLocked(r *Request[M], keys []string) {
	q.seq++
	r.seq, r.queued = q.seq, true
	q.queued++
	if len(keys) == 1 {
		r.keys = r.ks1[:0]
	} else if len(keys) > 1 {
		r.keys = make([]*keyState[M], 0, len(keys))
	}
	for _, key := range keys {
		k := q.keys[key]
		if k == nil {
			k = q.newKeyLocked(key)
		} else if k.mark == r.seq {
			continue // named twice
		}
		k.mark = r.seq
		if k.head < len(k.line) || k.held {
			r.blockers++
		}
		k.line = append(k.line, r)
		r.keys = append(r.keys, k)
	}
	if r.blockers == 0 {
		q.pushReady(r)
	}
}

// withdraw removes r from the queue if no batch took it yet.
func (q *Queue[M]) withdraw(r *Request[M]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !r.queued {
		return
	}
	r.queued = false
	q.queued--
	if r.idx >= 0 {
		q.removeReady(r.idx)
	}
	for _, k := range r.keys {
		if k.remove(r) && !k.held {
			// The next in line is first now, of a key not held.
			if n := k.first(); n != nil {
				q.unblockLocked(n)
			}
		}
		q.dropKeyLocked(k)
	}
	r.keys = nil
}

// takeLocked appends the next batch to batch and removes it from the
// queue: in arrival order, the requests that may go (first in their keys'
// lines, no key held by a batch in flight: so that no two requests of a
// key share a batch and each key's requests keep their order), up to
// maxOps and maxBytes (the first that would pass them ends the batch). A
// request to be committed alone goes alone, when no batch is in flight,
// and none queued after it goes before it. The batch's keys are held until
// releaseLocked. q.mu is held.
func (q *Queue[M]) takeLocked(batch []*Request[M]) []*Request[M] {
	if q.heldAlone {
		return batch
	}
	ops, size := 0, 0
	for len(q.ready) > 0 {
		r := q.ready[0]
		if r.alone {
			// Nothing after it may pass it: it touches every key.
			if len(batch) == 0 && q.heldKeys == 0 {
				q.removeReady(0)
				q.heldAlone = true
				batch = append(batch, r)
			}
			break
		}
		if len(batch) > 0 && (q.maxOps > 0 && ops+len(r.Ops) > q.maxOps || q.maxBytes > 0 && size+r.size > q.maxBytes) {
			break // full: r goes first in the next batch
		}
		q.removeReady(0)
		for _, k := range r.keys {
			// r is first in k's line: the next one stays blocked, by the
			// hold instead of by r.
			k.remove(r)
			k.held = true
		}
		q.heldKeys += len(r.keys)
		batch = append(batch, r)
		ops, size = ops+len(r.Ops), size+r.size
	}
	for _, r := range batch {
		r.queued = false
	}
	q.queued -= len(batch)
	return batch
}

// releaseLocked ends the hold of a committed batch's keys: the first
// request of each key's line is unblocked. q.mu is held.
func (q *Queue[M]) releaseLocked(batch []*Request[M]) {
	for _, r := range batch {
		if r.alone {
			q.heldAlone = false
		}
		for _, k := range r.keys {
			k.held = false
			q.heldKeys--
			if n := k.first(); n != nil {
				q.unblockLocked(n)
			}
			q.dropKeyLocked(k)
		}
		r.keys = nil
	}
}

// unblockLocked counts one blocker of r less; at none it is ready.
func (q *Queue[M]) unblockLocked(r *Request[M]) {
	if r.blockers--; r.blockers == 0 {
		q.pushReady(r)
	}
}

// newKeyLocked returns a new state for key, in q.keys.
func (q *Queue[M]) newKeyLocked(key string) *keyState[M] {
	var k *keyState[M]
	if n := len(q.spare); n > 0 {
		k, q.spare = q.spare[n-1], q.spare[:n-1]
	} else {
		k = &keyState[M]{}
	}
	if k.line == nil {
		k.line = k.buf[:0]
	}
	k.key = key
	q.keys[key] = k
	return k
}

// dropKeyLocked forgets k once no request queued or in flight has it.
func (q *Queue[M]) dropKeyLocked(k *keyState[M]) {
	if k.held || k.head < len(k.line) {
		return
	}
	delete(q.keys, k.key)
	if len(q.spare) >= maxSpare {
		return
	}
	line := k.line[:0]
	if cap(line) > 64 {
		line = nil // a long line's array is not kept
	}
	*k = keyState[M]{line: line}
	q.spare = append(q.spare, k)
}

// first returns the first request of k's line, nil when it is empty.
func (k *keyState[M]) first() *Request[M] {
	if k.head < len(k.line) {
		return k.line[k.head]
	}
	return nil
}

// remove removes r from k's line and reports whether it was first.
func (k *keyState[M]) remove(r *Request[M]) bool {
	if k.line[k.head] == r {
		k.line[k.head] = nil
		k.head++
		switch {
		case k.head == len(k.line):
			k.line, k.head = k.line[:0], 0
		case k.head >= 32 && 2*k.head >= len(k.line):
			n := copy(k.line, k.line[k.head:])
			clear(k.line[n:])
			k.line, k.head = k.line[:n], 0
		}
		return true
	}
	for i := k.head + 1; i < len(k.line); i++ {
		if k.line[i] == r {
			copy(k.line[i:], k.line[i+1:])
			k.line[len(k.line)-1] = nil
			k.line = k.line[:len(k.line)-1]
			break
		}
	}
	return false
}

// pushReady adds r to the ready heap.
func (q *Queue[M]) pushReady(r *Request[M]) {
	r.idx = len(q.ready)
	q.ready = append(q.ready, r)
	q.up(r.idx)
}

// removeReady removes the request at index i of the ready heap.
func (q *Queue[M]) removeReady(i int) {
	h := q.ready
	r, n := h[i], len(h)-1
	if i != n {
		h[i] = h[n]
		h[i].idx = i
	}
	h[n] = nil
	q.ready = h[:n]
	if i != n {
		if !q.down(i) {
			q.up(i)
		}
	}
	r.idx = -1
}

// up moves the request at index i of the ready heap towards the root.
func (q *Queue[M]) up(i int) {
	h := q.ready
	for i > 0 {
		p := (i - 1) / 2
		if h[p].seq < h[i].seq {
			break
		}
		h[p], h[i] = h[i], h[p]
		h[p].idx, h[i].idx = p, i
		i = p
	}
}

// down moves the request at index i of the ready heap towards the leaves
// and reports whether it moved.
func (q *Queue[M]) down(i0 int) bool {
	h := q.ready
	i := i0
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].seq < h[c].seq {
			c++
		}
		if h[i].seq < h[c].seq {
			break
		}
		h[i], h[c] = h[c], h[i]
		h[i].idx, h[c].idx = i, c
		i = c
	}
	return i > i0
}

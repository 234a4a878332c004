// Package groupcommit is a store.Store decorator that commits the Multi
// calls made at the same time on one session in a few combined Multis
// instead of one each: when many of a Node's jobs fire in the same instant,
// their Begins and Completes cost the coordination store a few
// transactions, not one per job (issue 31).
//
// A caller that finds fewer than DefaultMaxInFlight flushers running
// starts one; the others queue, and each flusher commits the queue batch
// after batch until nothing in it can be taken (coord/pgstore's committer
// is the model; pgstore has its own and is not wrapped). A batch is
// bounded by the wrapped store's request limit (store.RequestLimiter) and
// by DefaultMaxBatchOps.
//
// What a caller sees is what one Multi of its own would give:
//   - Isolation by key. A store gives all of one Multi's operations one
//     transaction id (ZooKeeper's zxid), so two requests touching the same
//     job must never share a batch: their epochs would be equal where they
//     must grow in commit order, and the second would see the first's
//     writes inside one transaction. Each path maps to a key (its first
//     Depth segments: /{namespace}/{job} in coord's layout); requests that
//     share a key never share a batch, nor go while a batch holding that
//     key is in flight, and keep their arrival order. A
//     request touching a node above the keys (a path shorter than Depth,
//     or a create or delete of a key's root, which changes its parent's
//     children) is committed alone.
//   - One refusal fails one request. When a combined Multi fails on an
//     operation (store.MultiError), that operation's request gets the error
//     (its Index rebased to the request) and the others are committed again
//     without it, in one combined Multi; a second refusal sends the rest
//     on Multis of their own. So another request's conflict costs a request
//     at most one retry of the batch.
//   - Other errors go to every request of the batch (a connection or
//     session error: the outcome is unknown, as of a plain Multi);
//     store.ErrTooLarge splits the batch in two, a lone request gets it.
//   - ctx: a caller whose ctx ends while queued leaves the queue (never
//     committed); one whose batch is in flight returns at once while the
//     batch goes on (its write may commit, as a ZooKeeper request may after
//     its caller gave up). The combined call ends only when every request's
//     ctx has ended.
//
// Every other method goes straight to the wrapped store.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/store"
)

// DefaultDepth is the key's number of path segments in coord's layout:
// /{namespace}/{job} (docs/zookeeper-layout.md).
const DefaultDepth = 2

// DefaultMaxInFlight is how many combined Multis of one session may be in
// flight at once: the next batches are on their way while the server
// commits one (a session's requests are applied in order; the keys of a
// batch in flight are held: a request of one of them waits for it).
const DefaultMaxInFlight = 4

// DefaultMaxBatchOps bounds a batch's operations (one request of any size
// always goes): a server applies a multi's operations one by one and every
// caller of a batch waits for all of them. Batches of up to 4,096
// operations, one in flight, made 1,000 jobs firing together wait longer
// than requests of their own; 64 operations (about ten Begins or
// Completes) with 4 in flight did best of the sizes measured side by side
// (docs/benchmarks.md, "Many jobs firing together").
const DefaultMaxBatchOps = 64

// Option configures NewCommitter and New.
type Option func(*Committer)

// WithDepth sets the number of leading path segments that make a request's
// key (default DefaultDepth). A smaller depth is always safe (coarser keys:
// fewer requests share a batch); a larger one only when no node deeper
// than depth-1 segments is shared by two keys' requests.
func WithDepth(n int) Option {
	return func(c *Committer) {
		if n > 0 {
			c.depth = n
		}
	}
}

// WithMaxInFlight sets how many combined Multis may be in flight at once
// (default DefaultMaxInFlight; values < 1 keep it).
func WithMaxInFlight(n int) Option {
	return func(c *Committer) {
		if n > 0 {
			c.maxInFlight = n
		}
	}
}

// WithMaxBatchOps sets the bound of a batch's operations (default
// DefaultMaxBatchOps; values < 1 keep it).
func WithMaxBatchOps(n int) Option {
	return func(c *Committer) {
		if n > 0 {
			c.maxOps = n
		}
	}
}

// Stats counts what a Store sent, for tests and benchmarks.
type Stats struct {
	// Requests counts Multi calls received; Batches the combined Multis
	// sent for them (retries included).
	Requests, Batches int64
	// Retries counts the combined Multis sent again without a refused
	// request; Alone the requests sent on their own after a second refusal.
	Retries, Alone int64
}

// SendFunc commits ops as one transaction: a store's own Multi.
type SendFunc func(ctx context.Context, ops ...store.Op) ([]store.OpResult, error)

// Committer coalesces the concurrent Multi requests of one session into
// combined calls of its SendFunc. A store adapter embeds one (zkstore);
// New wraps any store with one.
type Committer struct {
	send        SendFunc
	limit       int
	depth       int
	maxInFlight int
	maxOps      int

	mu    sync.Mutex
	queue []*request
	// flushing counts the flushers running; held, the keys of the batches
	// in flight (a count per key); heldAlone, a request committed alone is
	// in flight.
	flushing  int
	held      map[string]int
	heldAlone bool
	flushers  sync.WaitGroup
	closed    bool // Wait was called

	requests, batches, retries, alone atomic.Int64
}

// NewCommitter returns a Committer that commits through send, in batches
// of at most limit bytes (store.MultiSize; one request of any size goes
// alone).
func NewCommitter(send SendFunc, limit int, opts ...Option) *Committer {
	c := &Committer{send: send, limit: limit, depth: DefaultDepth, maxInFlight: DefaultMaxInFlight, maxOps: DefaultMaxBatchOps, held: map[string]int{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Stats returns the counters so far.
func (c *Committer) Stats() Stats {
	return Stats{Requests: c.requests.Load(), Batches: c.batches.Load(), Retries: c.retries.Load(), Alone: c.alone.Load()}
}

// Wait returns once no flusher runs: a store's Close calls it after
// closing, when every batch in flight ends with ErrClosed. Later Multis go
// straight to the store (which refuses them), so that no flusher starts
// while Wait waits.
func (c *Committer) Wait() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.flushers.Wait()
}

// Store wraps a store.Store and coalesces its concurrent Multi calls.
type Store struct {
	store.Store
	c *Committer
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.RequestLimiter = (*Store)(nil)
	_ store.FuncWatcher    = (*Store)(nil)
)

// New wraps st.
func New(st store.Store, opts ...Option) *Store {
	return &Store{Store: st, c: NewCommitter(st.Multi, store.RequestLimit(st), opts...)}
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() store.Store { return s.Store }

// Stats returns the counters so far.
func (s *Store) Stats() Stats { return s.c.Stats() }

// Multi commits ops as one transaction, in a combined Multi with the
// requests made beside it that touch other keys.
func (s *Store) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	return s.c.Multi(ctx, ops...)
}

// request is one Multi waiting to be committed.
type request struct {
	ctx  context.Context
	ops  []store.Op
	size int      // store.MultiSize(ops)
	keys []string // sorted, distinct; nil when alone
	// alone: the request touches a node above the keys.
	alone bool
	done  chan reply // capacity 1
	// queued is guarded by Store.mu: true until a batch takes it.
	queued bool
}

// reply is a request's outcome.
type reply struct {
	res []store.OpResult
	err error
}

// Multi commits ops as one transaction, in a combined call with the
// requests made beside it that touch other keys.
func (s *Committer) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if len(ops) == 0 {
		return s.send(ctx, ops...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.requests.Add(1)
	r := &request{ctx: ctx, ops: ops, size: store.MultiSize(ops), done: make(chan reply, 1), queued: true}
	r.keys, r.alone = keys(ops, s.depth)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.send(ctx, ops...)
	}
	s.queue = append(s.queue, r)
	start := s.flushing < s.maxInFlight
	if start {
		s.flushing++
		s.flushers.Add(1)
	}
	s.mu.Unlock()
	if start {
		go s.flushQueue()
	}
	select {
	case rep := <-r.done:
		return rep.res, rep.err
	case <-ctx.Done():
		s.withdraw(r)
		return nil, fmt.Errorf("groupcommit: multi on %s: %w", store.OpPath(ops[0]), ctx.Err())
	}
}

// keys returns the distinct keys of ops' paths (their first depth
// segments), and whether the request must be committed alone: one of its
// paths is shorter than a key, or it creates or deletes a key's root.
func keys(ops []store.Op, depth int) ([]string, bool) {
	var ks []string
	for _, op := range ops {
		p := store.OpPath(op)
		k, full := prefix(p, depth)
		if !full {
			return nil, true
		}
		if k == p {
			switch op.(type) {
			case *store.CreateOp, *store.DeleteOp:
				return nil, true
			}
		}
		found := false
		for _, x := range ks {
			if x == k {
				found = true
				break
			}
		}
		if !found {
			ks = append(ks, k)
		}
	}
	return ks, false
}

// prefix returns p's first depth segments, and false when p has fewer.
func prefix(p string, depth int) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	i := 0
	for n := 0; n < depth; n++ {
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			if n == depth-1 && len(p) > i+1 {
				return p, true
			}
			return "", false
		}
		if j == 0 {
			return "", false // an empty segment: let the store refuse it
		}
		i += 1 + j
	}
	return p[:i], true
}

// withdraw removes r from the queue if no batch took it yet.
func (s *Committer) withdraw(r *request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.queued {
		return
	}
	for i, x := range s.queue {
		if x == r {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	r.queued = false
}

// flushQueue commits the queue batch after batch and ends when nothing in
// it can be taken: it is empty, or what is left waits for keys held by
// another flusher's batch, which takes it once that batch is done.
func (s *Committer) flushQueue() {
	defer s.flushers.Done()
	var batch []*request
	for {
		s.mu.Lock()
		s.holdLocked(batch, -1)
		batch = s.takeLocked(s.limit)
		if len(batch) == 0 {
			s.flushing--
			s.mu.Unlock()
			return
		}
		s.holdLocked(batch, 1)
		s.mu.Unlock()
		s.commit(batch, 0)
	}
}

// holdLocked adds d to the hold of batch's keys. s.mu is held.
func (s *Committer) holdLocked(batch []*request, d int) {
	for _, r := range batch {
		if r.alone {
			s.heldAlone = d > 0
		}
		for _, k := range r.keys {
			if s.held[k] += d; s.held[k] <= 0 {
				delete(s.held, k)
			}
		}
	}
}

// takeLocked removes the next batch from the queue: in arrival order, the
// requests whose keys no request of the batch, nor of a batch in flight,
// nor an earlier request left in the queue, has (so that same-key requests
// keep their order), up to limit bytes and maxOps operations. A
// request to be committed alone goes alone, when no batch is in flight.
// s.mu is held.
func (s *Committer) takeLocked(limit int) []*request {
	if s.heldAlone {
		return nil
	}
	var batch []*request
	taken := map[string]bool{}   // keys of the batch
	blocked := map[string]bool{} // keys of the requests left behind
	ops, size := 0, 0
	rest := s.queue[:0]
	full := false
	for i, r := range s.queue {
		if full {
			rest = append(rest, s.queue[i:]...)
			break
		}
		if r.alone {
			if len(batch) == 0 && len(s.held) == 0 {
				batch = append(batch, r)
				full = true
				continue
			}
			rest = append(rest, s.queue[i:]...)
			break // nothing after it may pass it: it touches every key
		}
		fits := len(batch) == 0 || ops+len(r.ops) <= s.maxOps && size+r.size <= limit
		free := true
		for _, k := range r.keys {
			if taken[k] || blocked[k] || s.held[k] > 0 {
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
		ops, size = ops+len(r.ops), size+r.size
	}
	// rest shares s.queue's array: clear the tail so that no request
	// stays referenced.
	clear(s.queue[len(rest):])
	s.queue = rest
	for _, r := range batch {
		r.queued = false
	}
	return batch
}

// commit sends batch as one combined Multi and replies to its requests.
// refused counts the refusals this batch's requests have seen: after the
// second, the rest go on Multis of their own.
func (s *Committer) commit(batch []*request, refused int) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- reply{err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if refused >= 2 && len(live) > 1 {
		s.commitAlone(live, refused)
		return
	}
	s.batches.Add(1)
	var ops []store.Op
	if len(live) == 1 {
		ops = live[0].ops
	} else {
		n := 0
		for _, r := range live {
			n += len(r.ops)
		}
		ops = make([]store.Op, 0, n)
		for _, r := range live {
			ops = append(ops, r.ops...)
		}
	}
	res, err := s.call(live, ops)
	if err == nil && len(res) != len(ops) {
		err = fmt.Errorf("groupcommit: %d results for %d operations: %w", len(res), len(ops), store.ErrConnectionLoss)
	}
	if err == nil {
		off := 0
		for _, r := range live {
			r.done <- reply{res: res[off : off+len(r.ops) : off+len(r.ops)]}
			off += len(r.ops)
		}
		return
	}
	if len(live) == 1 {
		live[0].done <- reply{err: err}
		return
	}
	if s.refuse(live, ops, err, refused) {
		return
	}
	if errors.Is(err, store.ErrTooLarge) {
		// The store measured the batch larger than its limit said: halves.
		h := len(live) / 2
		s.commit(live[:h:h], refused)
		s.commit(live[h:], refused)
		return
	}
	for _, r := range live {
		if cerr := r.ctx.Err(); cerr != nil {
			r.done <- reply{err: cerr}
			continue
		}
		r.done <- reply{err: err}
	}
}

// commitAlone commits each request of live on a Multi of its own, at once.
func (s *Committer) commitAlone(live []*request, refused int) {
	s.alone.Add(int64(len(live)))
	var wg sync.WaitGroup
	for _, r := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.commit([]*request{r}, refused)
		}()
	}
	wg.Wait()
}

// refuse handles a combined call's refusal of one operation
// (store.MultiError): that operation's request gets the error, rebased to
// its own operations, and the others are committed again without it. It
// reports false when err is no refusal of one of ops.
func (s *Committer) refuse(live []*request, ops []store.Op, err error, refused int) bool {
	var me *store.MultiError
	if !errors.As(err, &me) || me.Index < 0 || me.Index >= len(ops) {
		return false
	}
	off := 0
	for i, r := range live {
		if me.Index < off+len(r.ops) {
			r.done <- reply{err: &store.MultiError{Index: me.Index - off, Op: me.Op, Err: me.Err}}
			rest := append(live[:i:i], live[i+1:]...)
			s.retries.Add(1)
			s.commit(rest, refused+1)
			return true
		}
		off += len(r.ops)
	}
	return false
}

// call makes the combined call; it lives while any request's ctx does.
func (s *Committer) call(live []*request, ops []store.Op) ([]store.OpResult, error) {
	if len(live) == 1 {
		return s.send(live[0].ctx, ops...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int32
	left.Store(int32(len(live)))
	for _, r := range live {
		stop := context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	return s.send(ctx, ops...)
}

// Close closes the wrapped store, then waits for the flusher: a batch in
// flight ends with the store's ErrClosed.
func (s *Store) Close() error {
	err := s.Store.Close()
	s.c.Wait()
	return err
}

// MaxRequestBytes forwards the wrapped store's request limit
// (store.RequestLimiter): a request that fits it alone fits here.
func (s *Store) MaxRequestBytes() int { return store.RequestLimit(s.Store) }

// GetWFunc forwards store.FuncWatcher (see ForwardsFuncWatches).
func (s *Store) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	return s.Store.(store.FuncWatcher).GetWFunc(ctx, path, fn)
}

// ExistsWFunc forwards store.FuncWatcher.
func (s *Store) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	return s.Store.(store.FuncWatcher).ExistsWFunc(ctx, path, fn)
}

// ChildrenWFunc forwards store.FuncWatcher.
func (s *Store) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
	return s.Store.(store.FuncWatcher).ChildrenWFunc(ctx, path, fn)
}

// ForwardsFuncWatches reports whether the wrapped store implements
// store.FuncWatcher (store.FuncWatchForwarder).
func (s *Store) ForwardsFuncWatches() bool { return store.FuncWatcherOf(s.Store) != nil }

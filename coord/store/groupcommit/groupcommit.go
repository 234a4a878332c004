// Package groupcommit is a store.Store decorator that commits the Multi
// calls made at the same time on one session in a few combined Multis
// instead of one each: when many of a Node's jobs fire in the same instant,
// their Begins and Completes cost the coordination store a few
// transactions, not one per job (issue 31).
//
// The queue is a Queue, which coord/pgstore's group commit shares (its
// commit is a statement of per-request savepoints, not one Multi): a
// caller that finds fewer than DefaultMaxInFlight flushers running starts
// one; the others queue, and each flusher commits the queue batch after
// batch until nothing in it can be taken. A batch is bounded by the
// wrapped store's request limit (store.RequestLimiter) and by
// DefaultMaxBatchOps.
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
// combined calls of its SendFunc, on a Queue keyed by job. A store adapter
// embeds one (zkstore, memstore's WithGroupCommit); New wraps any store
// with one.
type Committer struct {
	send        SendFunc
	depth       int
	maxInFlight int
	maxOps      int
	q           *Queue[struct{}]

	requests, batches, retries, alone atomic.Int64
}

// NewCommitter returns a Committer that commits through send, in batches
// of at most limit bytes (store.MultiSize; one request of any size goes
// alone).
func NewCommitter(send SendFunc, limit int, opts ...Option) *Committer {
	c := &Committer{send: send, depth: DefaultDepth, maxInFlight: DefaultMaxInFlight, maxOps: DefaultMaxBatchOps}
	for _, o := range opts {
		o(c)
	}
	c.q = NewQueue(func(batch []*request) { c.commit(batch, 0) }, QueueConfig[struct{}]{
		MaxInFlight: c.maxInFlight, MaxOps: c.maxOps, MaxBytes: limit,
		Keys: func(ops []store.Op) ([]string, bool) { return keys(ops, c.depth) },
		CtxErr: func(r *request) error {
			return fmt.Errorf("groupcommit: multi on %s: %w", store.OpPath(r.Ops[0]), r.Ctx.Err())
		},
	})
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
func (c *Committer) Wait() { c.q.Wait() }

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
type request = Request[struct{}]

// Multi commits ops as one transaction, in a combined call with the
// requests made beside it that touch other keys.
func (c *Committer) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if len(ops) == 0 {
		return c.send(ctx, ops...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.requests.Add(1)
	return c.q.Do(ctx, ops, struct{}{})
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

// commit sends batch as one combined Multi and replies to its requests.
// refused counts the refusals this batch's requests have seen: after the
// second, the rest go on Multis of their own.
func (c *Committer) commit(batch []*request, refused int) {
	live := c.q.Live(batch)
	if len(live) == 0 {
		return
	}
	if refused >= 2 && len(live) > 1 {
		c.commitAlone(live, refused)
		return
	}
	c.batches.Add(1)
	var ops []store.Op
	if len(live) == 1 {
		ops = live[0].Ops
	} else {
		n := 0
		for _, r := range live {
			n += len(r.Ops)
		}
		ops = make([]store.Op, 0, n)
		for _, r := range live {
			ops = append(ops, r.Ops...)
		}
	}
	ctx, stop := CallContext(live)
	res, err := c.send(ctx, ops...)
	stop()
	if err == nil && len(res) != len(ops) {
		err = fmt.Errorf("groupcommit: %d results for %d operations: %w", len(res), len(ops), store.ErrConnectionLoss)
	}
	if err == nil {
		off := 0
		for _, r := range live {
			r.Reply(res[off:off+len(r.Ops):off+len(r.Ops)], nil)
			off += len(r.Ops)
		}
		return
	}
	if len(live) == 1 {
		live[0].Reply(nil, err)
		return
	}
	if c.refuse(live, ops, err, refused) {
		return
	}
	if errors.Is(err, store.ErrTooLarge) {
		// The store measured the batch larger than its limit said: halves.
		h := len(live) / 2
		c.commit(live[:h:h], refused)
		c.commit(live[h:], refused)
		return
	}
	c.q.Fail(live, err)
}

// commitAlone commits each request of live on a Multi of its own, at once.
func (c *Committer) commitAlone(live []*request, refused int) {
	c.alone.Add(int64(len(live)))
	var wg sync.WaitGroup
	for _, r := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.commit([]*request{r}, refused)
		}()
	}
	wg.Wait()
}

// refuse handles a combined call's refusal of one operation
// (store.MultiError): that operation's request gets the error, rebased to
// its own operations, and the others are committed again without it. It
// reports false when err is no refusal of one of ops.
func (c *Committer) refuse(live []*request, ops []store.Op, err error, refused int) bool {
	var me *store.MultiError
	if !errors.As(err, &me) || me.Index < 0 || me.Index >= len(ops) {
		return false
	}
	off := 0
	for i, r := range live {
		if me.Index < off+len(r.Ops) {
			r.Reply(nil, &store.MultiError{Index: me.Index - off, Op: me.Op, Err: me.Err})
			rest := append(live[:i:i], live[i+1:]...)
			c.retries.Add(1)
			c.commit(rest, refused+1)
			return true
		}
		off += len(r.Ops)
	}
	return false
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

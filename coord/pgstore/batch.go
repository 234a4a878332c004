package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/store"
)

// Group commit. Every write transaction serializes on the txn row (zxids
// in commit order), so a store whose calls each paid their own transaction
// committed at most one write per lock hold: under concurrency (many jobs
// firing at once) calls queued on the row's lock until they exceeded their
// deadlines. The committer coalesces the Multi calls waiting at the same time
// into ONE statement of multi_batch (schema.go): one round trip and one lock
// hold for all of them, each request in its own savepoint with its own zxid.
//
// A caller that finds no batch in flight (maxFlushes) starts a flusher
// goroutine, which commits the queue batch after batch until it is empty
// and then ends (a store's call in flight: Close waits for it). Every
// caller returns by its own ctx: one whose ctx ends while queued leaves the
// queue (never committed); one whose batch is already on its way returns
// ctx.Err() at once while the batch goes on (its write may commit, as a
// ZooKeeper request may after its caller gave up). The batch's statement
// is cancelled only when every request's ctx has ended.

// maxFlushes is how many batches of one store may be in flight at once:
// one. The database runs writers one at a time anyway; a second batch in
// flight only splits the queue into smaller batches that each wait for the
// txn row's lock (TestWriteThroughput, 3 stores x 16 writers, load 28-31:
// 3,040-3,141 writes/s with one, 2,244-2,676 with two).
const maxFlushes = 1

// maxBatchOps bounds a batch's ops (one request of any size always fits):
// a batch is one statement, whose arrays and results the server holds.
const maxBatchOps = 4096

// hookFlush, when set by a test, runs before every flush with the number of
// requests it commits.
var hookFlush func(requests int)

// writeReq is one Multi waiting to be committed.
type writeReq struct {
	ctx  context.Context
	what string
	sess int64
	ops  []store.Op
	size int             // store.MultiSize(ops)
	done chan writeReply // capacity 1: the result
	// queued is guarded by committer.mu: true until a batch takes it.
	queued bool
}

// writeReply is a request's result.
type writeReply struct {
	res []store.OpResult
	err error
}

// committer queues the store's write requests for its flusher.
type committer struct {
	mu       sync.Mutex
	queue    []*writeReq
	flushing int
	maxBytes int // a batch's bound by store.MultiSize (one request always fits)
}

// takeLocked removes the next batch from the queue: requests in arrival
// order up to maxBatchOps ops and maxBytes bytes. c.mu is held.
func (c *committer) takeLocked() []*writeReq {
	n, ops, size := 0, 0, 0
	for _, r := range c.queue {
		if n > 0 && (ops+len(r.ops) > maxBatchOps || size+r.size > c.maxBytes) {
			break
		}
		n, ops, size = n+1, ops+len(r.ops), size+r.size
	}
	batch := make([]*writeReq, n)
	copy(batch, c.queue[:n])
	c.queue = append(c.queue[:0], c.queue[n:]...)
	for _, r := range batch {
		r.queued = false
	}
	return batch
}

// withdraw removes r from the queue if no batch took it yet.
func (c *committer) withdraw(r *writeReq) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.queued {
		return
	}
	for i, x := range c.queue {
		if x == r {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
	r.queued = false
}

// write commits ops as one Multi of session sess, in a batch with the
// requests queued beside it. The caller holds a store call (begin), so
// the flusher's calls.Add may race no Close.
func (s *Store) write(ctx context.Context, what string, sess int64, ops []store.Op, size int) ([]store.OpResult, error) {
	r := &writeReq{ctx: ctx, what: what, sess: sess, ops: ops, size: size, done: make(chan writeReply, 1), queued: true}
	c := &s.commits
	c.mu.Lock()
	c.queue = append(c.queue, r)
	start := c.flushing < maxFlushes
	if start {
		c.flushing++
		s.calls.Add(1)
	}
	c.mu.Unlock()
	if start {
		go s.flushQueue()
	}
	select {
	case rep := <-r.done:
		return rep.res, rep.err
	case <-ctx.Done():
		c.withdraw(r)
		return nil, ctxErr(ctx, what)
	}
}

// flushQueue is a flusher: it commits the queue batch after batch and ends
// when it is empty.
func (s *Store) flushQueue() {
	defer s.calls.Done()
	c := &s.commits
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.flushing--
			c.mu.Unlock()
			return
		}
		batch := c.takeLocked()
		c.mu.Unlock()
		s.flush(batch)
	}
}

// flush commits batch in one statement and replies to each request.
func (s *Store) flush(batch []*writeReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.done <- writeReply{err: ctxErr(r.ctx, r.what)}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if hookFlush != nil {
		hookFlush(len(live))
	}
	// The statement lives while any of its requests wants it.
	fctx, cancel := context.WithCancel(context.Background())
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
	results, errs, err := s.multiBatch(fctx, live)
	for i, r := range live {
		switch {
		case err != nil && r.ctx.Err() != nil:
			r.done <- writeReply{err: ctxErr(r.ctx, r.what)}
		case err != nil:
			r.done <- writeReply{err: err}
		case errs[i] != nil:
			r.done <- writeReply{err: errs[i]}
		default:
			r.done <- writeReply{res: results[i]}
		}
	}
}

// multiBatch runs multi_batch on reqs: each request's results or its own
// refusal (errs[i]), or err when the statement as a whole failed.
func (s *Store) multiBatch(ctx context.Context, reqs []*writeReq) (results [][]store.OpResult, errs []error, err error) {
	nOps := 0
	for _, r := range reqs {
		nOps += len(r.ops)
	}
	sesss, counts := make([]int64, len(reqs)), make([]int32, len(reqs))
	kinds, versions := make([]int32, 0, nOps), make([]int32, 0, nOps)
	paths, parents := make([]string, 0, nOps), make([]string, 0, nOps)
	datas := make([][]byte, 0, nOps)
	for i, r := range reqs {
		sesss[i], counts[i] = r.sess, int32(len(r.ops))
		for _, op := range r.ops {
			var k, v int32
			var p string
			var d []byte
			switch o := op.(type) {
			case *store.CreateOp:
				k, p, d = int32(o.Mode), o.Path, o.Data
			case *store.SetOp:
				k, p, d, v = 4, o.Path, o.Data, o.Version
			case *store.DeleteOp:
				k, p, v = 5, o.Path, o.Version
			case *store.CheckOp:
				k, p, v = 6, o.Path, o.Version
			}
			kinds, paths, datas, versions = append(kinds, k), append(paths, p), append(datas, d), append(versions, v)
			parents = append(parents, store.Parent(p))
		}
	}
	what := reqs[0].what
	if len(reqs) > 1 {
		what = fmt.Sprintf("a batch of %d writes (%s, ...)", len(reqs), what)
	}
	rows, err := s.pool.Query(ctx, "SELECT * FROM "+s.q+".multi_batch($1, $2, $3, $4, $5, $6, $7, $8)",
		sesss, counts, kinds, paths, parents, datas, versions, s.channel)
	if err != nil {
		return nil, nil, s.mapErr(ctx, what, err)
	}
	defer rows.Close()
	results, errs = make([][]store.OpResult, len(reqs)), make([]error, len(reqs))
	for rows.Next() {
		var req int32
		var refusal, path *string
		var ns nullStat
		if err := rows.Scan(append([]any{&req, &refusal, &path}, ns.dest()...)...); err != nil {
			return nil, nil, s.mapErr(ctx, what, err)
		}
		i := int(req) - 1
		if i < 0 || i >= len(reqs) {
			return nil, nil, fmt.Errorf("pgstore: %s: a result for request %d of %d: %w", what, req, len(reqs), store.ErrConnectionLoss)
		}
		if refusal != nil {
			// Rows its ops emitted before the refusal were rolled back.
			results[i], errs[i] = nil, s.refusal(reqs[i], *refusal)
			continue
		}
		if path == nil {
			return nil, nil, fmt.Errorf("pgstore: %s: a result of request %d without a path: %w", what, req, store.ErrConnectionLoss)
		}
		if len(results[i]) >= len(reqs[i].ops) {
			return nil, nil, fmt.Errorf("pgstore: %s: more results than the %d operations of request %d: %w", what, len(reqs[i].ops), req, store.ErrConnectionLoss)
		}
		r := store.OpResult{Path: *path}
		if _, set := reqs[i].ops[len(results[i])].(*store.SetOp); set {
			r.Stat = ns.stat()
		}
		results[i] = append(results[i], r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, s.mapErr(ctx, what, err)
	}
	for i, r := range reqs {
		if errs[i] == nil && len(results[i]) != len(r.ops) {
			return nil, nil, fmt.Errorf("pgstore: %s: %d results for %d operations: %w", what, len(results[i]), len(r.ops), store.ErrConnectionLoss)
		}
		if results[i] == nil && errs[i] == nil {
			results[i] = []store.OpResult{}
		}
	}
	return results, errs, nil
}

// refusal maps a request's error row ("index:reason", the index within the
// request; "0:session" for its expired session) to the store's errors.
func (s *Store) refusal(r *writeReq, msg string) error {
	idx, reason, _ := strings.Cut(msg, ":")
	if reason == "session" {
		return fmt.Errorf("pgstore: %s: session 0x%x expired on the server: %w", r.what, r.sess, store.ErrSessionExpired)
	}
	i, perr := strconv.Atoi(idx)
	sentinel, ok := refusals[reason]
	if perr != nil || !ok || i < 1 || i > len(r.ops) {
		return fmt.Errorf("pgstore: %s: unexpected refusal %q", r.what, msg)
	}
	op := r.ops[i-1]
	return &store.MultiError{Index: i - 1, Op: op, Err: fmt.Errorf("pgstore: %s %s: %w", opName(op), store.OpPath(op), sentinel)}
}

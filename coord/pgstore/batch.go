package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// Group commit. Every write transaction serializes on the txn row (zxids
// in commit order), so a store whose calls each paid their own transaction
// committed at most one write per lock hold: under concurrency (many jobs
// firing at once) calls queued on the row's lock until they exceeded their
// deadlines. The committer coalesces the Multi calls waiting at the same time
// into ONE statement of multi_batch (schema.go): one round trip and one lock
// hold for all of them, each request in its own savepoint with its own zxid.
//
// The queue is coord/store/groupcommit's Queue (zkstore's committer
// shares it): a caller that finds no batch in flight (maxFlushes) starts a
// flusher, which commits the queue batch after batch until it is empty.
// Every caller returns by its own ctx: one whose ctx ends while queued
// leaves the queue (never committed); one whose batch is already on its
// way returns ctx.Err() at once while the batch goes on (its write may
// commit, as a ZooKeeper request may after its caller gave up). The
// batch's statement is cancelled only when every request's ctx has ended.

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

// writeMeta is what a write request carries besides its ops: its call's
// name, for errors, and its session.
type writeMeta struct {
	what string
	sess int64
}

// writeReq is one Multi waiting to be committed.
type writeReq = groupcommit.Request[writeMeta]

// newCommits returns the store's group commit queue: the queue shared with
// zkstore's committer (coord/store/groupcommit), without keys (each
// request has its own savepoint and zxid in multi_batch), one batch in
// flight, committing by flush.
func (s *Store) newCommits() *groupcommit.Queue[writeMeta] {
	return groupcommit.NewQueue(s.flush, groupcommit.QueueConfig[writeMeta]{
		MaxInFlight: maxFlushes, MaxOps: maxBatchOps, MaxBytes: 4 * s.cfg.MaxRequestBytes,
		CtxErr: func(r *writeReq) error { return ctxErr(r.Ctx, r.Meta.what) },
	})
}

// write commits ops as one Multi of session sess, in a batch with the
// requests queued beside it. The caller holds a store call (begin): Close
// waits for the calls, then for the flushers (Queue.Wait).
func (s *Store) write(ctx context.Context, what string, sess int64, ops []store.Op) ([]store.OpResult, error) {
	return s.commits.Do(ctx, ops, writeMeta{what: what, sess: sess})
}

// flush commits batch in one statement and replies to each request.
func (s *Store) flush(batch []*writeReq) {
	live := s.commits.Live(batch)
	if len(live) == 0 {
		return
	}
	if hookFlush != nil {
		hookFlush(len(live))
	}
	// The statement lives while any of its requests wants it.
	fctx, stop := groupcommit.CallContext(live)
	defer stop()
	results, errs, err := s.multiBatch(fctx, live)
	if err != nil {
		s.commits.Fail(live, err)
		return
	}
	for i, r := range live {
		r.Reply(results[i], errs[i])
	}
}

// multiBatch runs multiFunc on reqs: each request's results or its own
// refusal (errs[i]), or err when the statement as a whole failed.
func (s *Store) multiBatch(ctx context.Context, reqs []*writeReq) (results [][]store.OpResult, errs []error, err error) {
	nOps := 0
	for _, r := range reqs {
		nOps += len(r.Ops)
	}
	sesss, counts := make([]int64, len(reqs)), make([]int32, len(reqs))
	kinds, versions := make([]int32, 0, nOps), make([]int32, 0, nOps)
	paths, parents := make([]string, 0, nOps), make([]string, 0, nOps)
	datas := make([][]byte, 0, nOps)
	for i, r := range reqs {
		sesss[i], counts[i] = r.Meta.sess, int32(len(r.Ops))
		for _, op := range r.Ops {
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
	what := reqs[0].Meta.what
	if len(reqs) > 1 {
		what = fmt.Sprintf("a batch of %d writes (%s, ...)", len(reqs), what)
	}
	rows, err := s.pool.Query(ctx, "SELECT * FROM "+s.q+"."+multiFunc+"($1, $2, $3, $4, $5, $6, $7, $8)",
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
		if len(results[i]) >= len(reqs[i].Ops) {
			return nil, nil, fmt.Errorf("pgstore: %s: more results than the %d operations of request %d: %w", what, len(reqs[i].Ops), req, store.ErrConnectionLoss)
		}
		r := store.OpResult{Path: *path}
		if _, set := reqs[i].Ops[len(results[i])].(*store.SetOp); set {
			r.Stat = ns.stat()
		}
		results[i] = append(results[i], r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, s.mapErr(ctx, what, err)
	}
	for i, r := range reqs {
		if errs[i] == nil && len(results[i]) != len(r.Ops) {
			return nil, nil, fmt.Errorf("pgstore: %s: %d results for %d operations: %w", what, len(results[i]), len(r.Ops), store.ErrConnectionLoss)
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
		return fmt.Errorf("pgstore: %s: session 0x%x expired on the server: %w", r.Meta.what, r.Meta.sess, store.ErrSessionExpired)
	}
	i, perr := strconv.Atoi(idx)
	sentinel, ok := refusals[reason]
	if perr != nil || !ok || i < 1 || i > len(r.Ops) {
		return fmt.Errorf("pgstore: %s: unexpected refusal %q", r.Meta.what, msg)
	}
	op := r.Ops[i-1]
	return &store.MultiError{Index: i - 1, Op: op, Err: fmt.Errorf("pgstore: %s %s: %w", opName(op), store.OpPath(op), sentinel)}
}

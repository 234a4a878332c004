package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/dataflow"
)

// The transactional mode's one-statement batch. When an item's batches
// reach ProcessBatch whole (one worker per item, as the engine hands a
// batch cut into one slice), its Fetch begins the batch's transaction and
// reads, locks and marks the rows done in one statement (lockMark); the
// ProcessBatch that gets those rows runs the function in that
// transaction, fences and commits. One round trip and one pass over the
// rows, instead of a read and then a lock and look-up of each row by key.
// Exactly once holds as before: the marks commit or roll back with the
// effects and the fence.
//
// With several workers per item (Shard.Threads > 1) the Fetch begins one
// transaction per slice (a group), each with that statement, and the
// engine cuts the batch where they are (TxJob.Slices, a
// dataflow.BatchSlicer): each slice's ProcessBatch commits its own. An
// item then holds a connection per slice from its Fetch, as many as its
// slices held before.
//
// Anything else falls back to the two-pass path, with the transaction
// rolled back first (the rows are pending again, attempts unchanged): a
// batch processed in slices other than as fetched (a host that cuts it
// otherwise: a transaction cannot be shared by slices), a row that cannot
// be read, a function error (the rows are then retried one per
// transaction, as before). A batch its run never hands to ProcessBatch
// (the run's ctx ended) is rolled back when ctx ends. An item has at most
// one batch's transactions open at a time.

// batchShape is how an item's batches reach ProcessBatch, learnt from its
// slices.
type batchShape uint8

const (
	shapeUnknown batchShape = iota
	shapeWhole              // each fetched batch in one slice
	shapeSliced             // cut into slices for several workers
)

type heldState uint8

const (
	heldFetching   heldState = iota // the item's slot is reserved; the Fetch's statement runs
	heldFetched                     // rows locked and marked; waiting for ProcessBatch
	heldProcessing                  // its ProcessBatch owns the transaction
	heldClosing                     // being rolled back (its run ended, or sliced)
)

// held is the transaction a Fetch opened for its batch.
type held[T any] struct {
	state    heldState
	tx       pgx.Tx
	inCommit bool // the commit fences (fenceCommitSQL)
	epoch    int64
	rows     []Row[T]
	closed   chan struct{} // closed once the slot is free again
	stop     func() bool   // unregisters the rollback at the run's end
}

// holds are a TxJob's open Fetch transactions and learnt shapes, per job
// and item.
type holds[T any] struct {
	mu    sync.Mutex
	open  map[itemKey]*held[T]
	shape map[itemKey]batchShape
	last  map[itemKey]lastFetch // the two-pass path's last fetch
	// groups are the open transactions of batches fetched in slices
	// (several workers per item, the engine cutting the batch where the
	// Fetch did: TxJob.Slices), one per slice, in the batch's order.
	groups map[itemKey]*group[T]
}

// group is a batch fetched in slices: its Fetch's transactions, one per
// slice.
type group[T any] struct {
	epoch    int64
	fetching bool // the Fetch's statements run
	parts    []*held[T]
}

// lastFetch is what a two-pass Fetch returned: its ProcessBatch learns the
// item's shape from it.
type lastFetch struct {
	n     int
	first int64
}

// itemKey names a job's shard item in holds (a held transaction records
// its epoch itself).
type itemKey struct {
	job         string
	item, total int
}

func holdKey(shard dataflow.Shard) itemKey {
	return itemKey{shard.JobName, shard.Item, shard.Total}
}

// reserve returns a reserved slot for a one-statement Fetch of shard's
// item: only when its batches are known to arrive whole, ctx can end (its
// end rolls back a batch never processed) and the item has no transaction
// open (a pipelined Fetch while the previous batch runs takes the
// two-pass path).
func (h *holds[T]) reserve(ctx context.Context, shard dataflow.Shard) *held[T] {
	if ctx.Done() == nil || ctx.Err() != nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(shard)
	if h.shape[k] != shapeWhole || h.open[k] != nil || h.groups[k] != nil {
		return nil
	}
	if h.open == nil {
		h.open = map[itemKey]*held[T]{}
	}
	e := &held[T]{state: heldFetching, epoch: shard.Epoch, closed: make(chan struct{})}
	h.open[k] = e
	delete(h.last, k) // a two-pass fetch's, no longer the last
	return e
}

// fetched records e's rows, locked in its transaction tx, and rolls them
// back when ctx ends before a ProcessBatch takes them.
func (h *holds[T]) fetched(ctx context.Context, j *TxJob[T], shard dataflow.Shard, e *held[T], tx pgx.Tx, inCommit bool, rows []Row[T]) {
	k := holdKey(shard)
	h.mu.Lock()
	defer h.mu.Unlock()
	e.state, e.tx, e.inCommit, e.rows = heldFetched, tx, inCommit, rows
	// Registered under the lock: if ctx has already ended, the rollback
	// starts at once and waits for it.
	h.rollbackAtEnd(ctx, j, k, e)
}

// rollbackAtEnd rolls e back when ctx ends before a ProcessBatch takes it.
// Called with h.mu held.
func (h *holds[T]) rollbackAtEnd(ctx context.Context, j *TxJob[T], k itemKey, e *held[T]) {
	e.stop = context.AfterFunc(ctx, func() {
		h.mu.Lock()
		mine := h.holding(k, e) && e.state == heldFetched
		if mine {
			e.state = heldClosing
		}
		h.mu.Unlock()
		if mine {
			j.rollback(e)
			h.release(k, e)
		}
	})
}

// holding reports whether e is k's open transaction, or one of its
// group's. Called with h.mu held.
func (h *holds[T]) holding(k itemKey, e *held[T]) bool {
	if h.open[k] == e {
		return true
	}
	if g := h.groups[k]; g != nil {
		for _, p := range g.parts {
			if p == e {
				return true
			}
		}
	}
	return false
}

// release frees e's slot; e's transaction is over.
func (h *holds[T]) release(k itemKey, e *held[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[k] == e {
		delete(h.open, k)
	}
	if g := h.groups[k]; g != nil {
		for i, p := range g.parts {
			if p == e {
				g.parts = append(g.parts[:i:i], g.parts[i+1:]...)
				break
			}
		}
		if len(g.parts) == 0 && !g.fetching {
			delete(h.groups, k)
		}
	}
	select {
	case <-e.closed:
	default:
		close(e.closed)
	}
}

// take is ProcessBatch's look at the item's open transaction. use: items
// are exactly its batch, now this ProcessBatch's (heldProcessing). Else,
// when the transaction holds items' rows: rollback, the caller rolls it
// back and releases it (a batch cut into slices, learnt as such); wait,
// another slice of the batch does, and the caller waits for e.closed
// before it locks its rows. nil when no open transaction holds them.
func (h *holds[T]) take(shard dataflow.Shard, items []Row[T]) (e *held[T], use, rollback bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(shard)
	if g := h.groups[k]; g != nil && len(items) > 0 {
		for _, p := range g.parts {
			if !holdsAny(p.rows, items[0].Key) {
				continue
			}
			switch {
			case p.state == heldProcessing || p.state == heldFetching:
				return nil, false, false
			case p.state == heldClosing:
				return p, false, false
			case p.epoch == shard.Epoch && sameRows(p.rows, items):
				p.state = heldProcessing
				p.stop()
				return p, true, false
			}
			// Not a slice as fetched (a host that cut the batch
			// otherwise): this part goes back to pending; the others
			// are taken by their slices or rolled back when the run ends.
			p.state = heldClosing
			p.stop()
			return p, false, true
		}
	}
	e = h.open[k]
	if e == nil || len(items) == 0 || e.state == heldProcessing || e.state == heldFetching {
		return nil, false, false
	}
	if !holdsAny(e.rows, items[0].Key) {
		return nil, false, false
	}
	if e.state == heldClosing {
		return e, false, false
	}
	if e.epoch == shard.Epoch && sameRows(e.rows, items) {
		e.state = heldProcessing
		e.stop()
		return e, true, false
	}
	// Not this batch as fetched (a slice of it: several workers): the
	// item's next batches take the two-pass path until one arrives whole.
	e.state = heldClosing
	e.stop()
	h.setShape(k, shapeSliced)
	return e, false, true
}

// learn records the shape of shard's item from a slice of a two-pass
// fetch: the fetch whole, or a part of it.
func (h *holds[T]) learn(shard dataflow.Shard, items []Row[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(shard)
	l, ok := h.last[k]
	if !ok || len(items) == 0 {
		return
	}
	switch {
	case len(items) == l.n && items[0].Key == l.first:
		h.setShape(k, shapeWhole)
	case len(items) < l.n:
		h.setShape(k, shapeSliced)
	}
}

// fetchedTwoPass records what a two-pass Fetch of shard's item returned.
func (h *holds[T]) fetchedTwoPass(shard dataflow.Shard, rows []Row[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		h.last = map[itemKey]lastFetch{}
	}
	if len(h.last) > 4096 {
		clear(h.last)
	}
	k := holdKey(shard)
	if len(rows) == 0 {
		delete(h.last, k)
		return
	}
	h.last[k] = lastFetch{n: len(rows), first: rows[0].Key}
}

func (h *holds[T]) setShape(k itemKey, s batchShape) {
	if h.shape == nil {
		h.shape = map[itemKey]batchShape{}
	}
	if len(h.shape) > 4096 {
		clear(h.shape)
	}
	h.shape[k] = s
}

func holdsAny[T any](rows []Row[T], key int64) bool {
	for i := range rows {
		if rows[i].Key == key {
			return true
		}
	}
	return false
}

func sameRows[T any](a, b []Row[T]) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key {
			return false
		}
	}
	return true
}

// rollback ends e's transaction, whatever the run's ctx: its rows go back
// to pending as they were.
func (j *TxJob[T]) rollback(e *held[T]) {
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	if err := e.tx.Rollback(ctx); err != nil && ctx.Err() == nil {
		// The connection is closed on a failed rollback, which ends the
		// transaction and its locks on the server as well.
		j.src.cfg.Logger.Debug("sources/postgres: rolling back an unprocessed batch", "table", j.src.spec.Table, "err", err)
	}
}

// unhold rolls back and releases e after take said rollback, or waits
// until the slice that does so has.
func (j *TxJob[T]) unhold(ctx context.Context, shard dataflow.Shard, e *held[T], rollback bool) error {
	if rollback {
		j.rollback(e)
		j.holds.release(holdKey(shard), e)
		return nil
	}
	select {
	case <-e.closed: // the rollback is bounded by markTimeout
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserveGroup returns a reserved group for a Fetch of shard's item in
// slices, one transaction each: only when ctx can end (its end rolls back
// slices never processed) and the item has no transaction open.
func (h *holds[T]) reserveGroup(ctx context.Context, shard dataflow.Shard) *group[T] {
	if ctx.Done() == nil || ctx.Err() != nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(shard)
	if h.open[k] != nil || h.groups[k] != nil {
		return nil
	}
	if h.groups == nil {
		h.groups = map[itemKey]*group[T]{}
	}
	g := &group[T]{epoch: shard.Epoch, fetching: true}
	h.groups[k] = g
	return g
}

// addPart records a slice's transaction tx, its rows locked and marked,
// in g (still fetching: no ProcessBatch takes it yet).
func (h *holds[T]) addPart(g *group[T], tx pgx.Tx, inCommit bool, rows []Row[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g.parts = append(g.parts, &held[T]{state: heldFetching, tx: tx, inCommit: inCommit, epoch: g.epoch, rows: rows, closed: make(chan struct{})})
}

// fetchedGroup ends g's Fetch: its parts may be taken, and are rolled
// back when ctx ends before their ProcessBatch.
func (h *holds[T]) fetchedGroup(ctx context.Context, j *TxJob[T], shard dataflow.Shard, g *group[T]) {
	k := holdKey(shard)
	h.mu.Lock()
	defer h.mu.Unlock()
	g.fetching = false
	for _, e := range g.parts {
		e.state = heldFetched
		h.rollbackAtEnd(ctx, j, k, e)
	}
}

// dropGroup rolls back every part of g and frees the item (a Fetch in
// slices that failed or found nothing).
func (j *TxJob[T]) dropGroup(shard dataflow.Shard, g *group[T]) {
	h := &j.holds
	k := holdKey(shard)
	h.mu.Lock()
	parts := g.parts
	g.parts, g.fetching = nil, false
	if h.groups[k] == g {
		delete(h.groups, k)
	}
	h.mu.Unlock()
	for _, e := range parts {
		j.rollback(e)
		close(e.closed)
	}
}

// ends returns where items, a batch fetched in slices, is cut: each
// part's rows, in order; nil when items is not such a batch.
func (h *holds[T]) ends(shard dataflow.Shard, items []Row[T]) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[holdKey(shard)]
	if g == nil || g.fetching || g.epoch != shard.Epoch {
		return nil
	}
	ends := make([]int, 0, len(g.parts))
	n := 0
	for _, e := range g.parts {
		if e.state != heldFetched || n+len(e.rows) > len(items) || !sameRows(e.rows, items[n:n+len(e.rows)]) {
			return nil
		}
		n += len(e.rows)
		ends = append(ends, n)
	}
	if n != len(items) {
		return nil
	}
	return ends
}

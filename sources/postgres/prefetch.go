package postgres

import (
	"context"
	"sync"

	"github.com/shardflow/shardflow/dataflow"
)

// prefetches hold, per job and item, the rows a transactional batch read
// for the item's next Fetch: the read rides in the round trip that begins
// the batch's transaction and locks its rows, so the Fetch that follows
// the batch costs no round trip of its own. The rows are the ones a Fetch
// would have read a batch earlier (as with dataflow's PipelinedFetch):
// ProcessBatch locks each row again and skips those no longer pending. A
// Fetch takes them only in the same item run (the same ctx.Done channel:
// rows read in an earlier run are never handed to a later one), at the
// same epoch and cursor, and only after the batch that read them
// committed; anything else reads afresh.
type prefetches[T any] struct {
	mu sync.Mutex
	m  map[prefetchKey]prefetched[T]
}

type prefetchKey struct {
	job         string
	item, total int
}

type prefetched[T any] struct {
	epoch int64
	run   <-chan struct{} // ctx.Done() of the item run that read them
	pos   position        // the cursor they were read after
	rows  []Row[T]
}

// put keeps rows, read after pos by a batch of shard's run (ctx) that
// committed, for the item's next Fetch. A ctx that cannot end has no run
// to tie them to: nothing is kept.
func (p *prefetches[T]) put(ctx context.Context, shard dataflow.Shard, pos position, rows []Row[T]) {
	run := ctx.Done()
	if run == nil || ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[prefetchKey]prefetched[T]{}
	}
	p.m[prefetchKey{shard.JobName, shard.Item, shard.Total}] = prefetched[T]{epoch: shard.Epoch, run: run, pos: pos, rows: rows}
}

// take returns and forgets the rows kept for shard's item if they were read
// after pos in this run (ctx) at shard's epoch; the rows kept are forgotten
// either way.
func (p *prefetches[T]) take(ctx context.Context, shard dataflow.Shard, pos position) ([]Row[T], bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := prefetchKey{shard.JobName, shard.Item, shard.Total}
	got, ok := p.m[k]
	if !ok {
		return nil, false
	}
	delete(p.m, k)
	run := ctx.Done()
	if run == nil || got.run != run || ctx.Err() != nil || got.epoch != shard.Epoch || got.pos != pos {
		return nil, false
	}
	return got.rows, true
}

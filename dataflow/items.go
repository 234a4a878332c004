package dataflow

import (
	"context"
	"sync"
	"time"
)

// ItemResult is the outcome of one shard item in one run: what the Node
// records in history (NodeConfig.History), logs and measures.
type ItemResult struct {
	// Item and Epoch are the shard item and its fencing epoch in the run.
	Item  int
	Epoch int64
	// Failover is true when this server took the item over from a crashed one.
	Failover bool
	// Success and Failure are the item's counted outcomes.
	Success, Failure int64
	// Err is the item's first error (whatever the ErrorPolicy), nil if none.
	Err error
	// Started is when the item's run began; Duration how long it took.
	Started  time.Time
	Duration time.Duration
}

// itemOutcome is what one item's run reports to runItems.
type itemOutcome struct {
	success, failure int64
	err              error
}

// runItems is the one path every shard item's run takes, whatever the job
// type: each item runs runItem concurrently (the last one on the caller's
// goroutine) and runItems returns when all have, with one ItemResult per
// shard in shard order. Per-item bookkeeping (timing, results for history,
// tracing) lives here so that every job type gets it the same way.
func runItems(ctx context.Context, shards []Shard, cfg pipelineConfig, runItem func(ctx context.Context, i int) itemOutcome) []ItemResult {
	results := make([]ItemResult, len(shards))
	if len(shards) == 0 {
		return results
	}
	// The last item on the caller's goroutine; for a run of one item (the
	// common case) no WaitGroup nor closure is made at all.
	last := len(shards) - 1
	if last == 0 {
		runOneItem(ctx, shards, cfg, runItem, results, 0)
		return results
	}
	var wg sync.WaitGroup
	for i := range last {
		wg.Go(func() { runOneItem(ctx, shards, cfg, runItem, results, i) })
	}
	runOneItem(ctx, shards, cfg, runItem, results, last)
	wg.Wait()
	return results
}

// runOneItem is runItems' run of shards[i], its result in results[i].
func runOneItem(ctx context.Context, shards []Shard, cfg pipelineConfig, runItem func(ctx context.Context, i int) itemOutcome, results []ItemResult, i int) {
	s := shards[i]
	ictx, span := startItemSpan(ctx, cfg.Tracer, cfg.JobName, s)
	started := time.Now()
	o := runItem(ictx, i)
	results[i] = ItemResult{Item: s.Item, Epoch: s.Epoch, Failover: s.Failover,
		Success: o.success, Failure: o.failure, Err: o.err, Started: started, Duration: time.Since(started)}
	endSpan(span, o.success, o.failure, o.err)
}

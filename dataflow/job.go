package dataflow

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// JobConfig is a job's configuration; see package coord/jobconfig for every
// field, its default and its validation.
type JobConfig = jobconfig.Config

// Job is a dataflow job processing items one at a time. Fetch and Process
// are called concurrently for different shard items, and Process is called
// by up to ConcurrentDataProcessThreadCount workers at once for one item.
type Job[T any] interface {
	// Fetch returns up to shard.FetchCount items of shard.Item. An empty
	// result ends a streaming loop. An error ends this shard item's run and
	// is handled by the job's error policy.
	Fetch(ctx context.Context, shard Shard) ([]T, error)
	// Process handles one item. nil counts a success; an error (or a panic,
	// which is recovered) counts a failure and processing goes on with the
	// other items.
	Process(ctx context.Context, shard Shard, item T) error
}

// BatchJob is a dataflow job processing fetched items in slices. The fetched
// items are split into at most ConcurrentDataProcessThreadCount slices,
// processed concurrently.
type BatchJob[T any] interface {
	// Fetch is as in Job.
	Fetch(ctx context.Context, shard Shard) ([]T, error)
	// ProcessBatch handles items and returns how many succeeded: succeeded
	// count as successes and the rest as failures. A non-nil error means the
	// whole slice failed, whatever succeeded says, except a *Skipped
	// returned as is (not wrapped): then its N items count neither as
	// successes nor as failures, and the rest (len(items)-succeeded-N) as
	// failures.
	ProcessBatch(ctx context.Context, shard Shard, items []T) (succeeded int, err error)
}

// BatchSlicer is a BatchJob that cuts its fetched batches into slices
// itself, such as sources/postgres's transactional mode, whose Fetch opens
// one transaction per slice. The engine asks it for each fetched batch.
type BatchSlicer[T any] interface {
	// Slices returns the ends of the slices of items, the batch Fetch
	// returned for shard: ascending, the last len(items), at most
	// shard.Threads of them. nil, or ends that are not so, leave the cut
	// to the engine (near-equal contiguous slices).
	Slices(shard Shard, items []T) []int
}

// Skipped is what ProcessBatch returns as its error when N of its items
// were not its to process: another transaction holds them, or they are no
// longer pending (a source whose Fetch may read rows a batch still in
// flight holds, such as sources/postgres with PipelinedFetch). They are
// someone else's work, counted where they are processed; counting them here
// too would report more successes than items. A Skipped is no failure: the
// run records no error for it.
type Skipped struct {
	// N is the number of items skipped, 0..len(items)-succeeded.
	N int
}

// Error describes the skip; Skipped satisfies error only to travel in
// ProcessBatch's error result.
func (e *Skipped) Error() string {
	return fmt.Sprintf("dataflow: %d items skipped (not this batch's to process)", e.N)
}

// Shard is the context of one shard item's run, handed to every Fetch and
// Process call.
type Shard struct {
	// JobName is the job's name.
	JobName string
	// ServerID is the id of the server running the item (NodeConfig.ServerID
	// with its default applied): sources and sinks record it as the owner of
	// their writes (sources/postgres's claimed_by).
	ServerID string
	// Item is the shard item, 0..Total-1.
	Item int
	// Total is the job's ShardingTotalCount.
	Total int
	// ItemParameter is this item's value from ShardingItemParameters ("" if none).
	ItemParameter string
	// JobParameter is the job's JobParameter.
	JobParameter string
	// FetchCount is FetchDataCount: the most items Fetch should return.
	FetchCount int
	// Threads is ConcurrentDataProcessThreadCount as the engine applies
	// it: the most slices a fetched batch is cut into (set by the engine
	// before the first Fetch).
	Threads int
	// Epoch is the fencing epoch of this item's ownership: it changes, and
	// grows, whenever the item changes owner (resharding, failover). Sinks
	// store it with their writes to refuse a stale owner's commit.
	Epoch int64
	// Failover is true when this server took the item over from a crashed one.
	Failover bool
	// WorkflowRun is the workflow run this item's run serves (a job with
	// DependsOn, or a job others depend on: docs/workflows.md); "" for a
	// job in no workflow.
	WorkflowRun string

	fence  func(ctx context.Context) error
	report func(ctx context.Context, err error)
	handle ErrorHandler
}

// CheckOwnership is the fencing check to call right before committing
// side effects: nil only if this server still owns the item with the same
// Epoch on a live coordination session. On the embedded single-process
// default without coordination it always returns nil.
func (s Shard) CheckOwnership(ctx context.Context) error {
	if s.fence == nil {
		return nil
	}
	return s.fence(ctx)
}

// WithFence returns a copy of s whose CheckOwnership calls fence. The Node
// sets it; tests and custom hosts of the pipeline may too.
func (s Shard) WithFence(fence func(ctx context.Context) error) Shard {
	s.fence = fence
	return s
}

// ReportError reports an error the item's run goes on from, such as a
// source backing off a failing statement: the Node records its text as
// this server's lastError in status (cleared when the next run begins, or
// by ReportError(ctx, nil)) and counts it in the job's metrics. Call it
// once per occurrence worth an operator's attention, not once per item.
// Without a reporter (tests, custom hosts) it does nothing.
func (s Shard) ReportError(ctx context.Context, err error) {
	if s.report != nil {
		s.report(ctx, err)
	}
}

// WithReporter returns a copy of s whose ReportError calls report. The
// Node sets it; tests and custom hosts of the pipeline may too.
func (s Shard) WithReporter(report func(ctx context.Context, err error)) Shard {
	s.report = report
	return s
}

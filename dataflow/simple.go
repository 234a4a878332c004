package dataflow

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// SimpleFunc is a simple job, as ElasticJob's SimpleJob: called once per
// owned shard item per trigger, concurrently for different items. nil
// counts one success; an error (or a recovered panic) counts one failure
// and is handled by the job's error policy. ctx is cancelled when this
// server loses the item, on a hard stop, and when the job's ItemTimeout
// passes; check shard.CheckOwnership before committing side effects.
type SimpleFunc func(ctx context.Context, shard Shard) error

// AddSimpleJob adds a simple job to n, as AddJob does for a dataflow job:
// the same coordination, fencing, counting, listeners, misfire, failover
// and timeouts, since each item's call runs through the same per-item
// pipeline (a one-element fetch, then one Process call). cfg.JobType ""
// means SIMPLE; SCRIPT and HTTP are accepted too (packages jobtypes/script
// and jobtypes/httpjob build their SimpleFunc); DATAFLOW is refused.
// StreamingProcess must be false. Errors are those of AddJob.
func AddSimpleJob(ctx context.Context, n *Node, cfg JobConfig, fn SimpleFunc, opts ...JobOption) error {
	if fn == nil {
		return fmt.Errorf("dataflow: AddSimpleJob %q: fn is nil; pass the function to run per shard item", cfg.JobName)
	}
	if cfg.JobType == "" {
		cfg.JobType = jobconfig.JobTypeSimple
	}
	if cfg.JobType == jobconfig.JobTypeDataflow {
		return fmt.Errorf("dataflow: AddSimpleJob %q: jobType is DATAFLOW; add a dataflow job with AddJob, or leave JobType empty", cfg.JobName)
	}
	return n.add(ctx, cfg, func(ctx context.Context, shards []Shard, pc pipelineConfig) RunResult {
		return runSimpleJob(ctx, fn, shards, pc)
	}, opts)
}

// runSimpleJob runs fn once per shard, concurrently, through the pipeline
// engine (runJob over a one-item fetch): the engine under Node for simple
// jobs. cfg.Streaming is ignored.
func runSimpleJob(ctx context.Context, fn SimpleFunc, shards []Shard, cfg pipelineConfig) RunResult {
	cfg.Streaming = false
	return runJob[struct{}](ctx, simpleJob(fn), shards, cfg)
}

// simpleJob adapts a SimpleFunc to Job: Fetch hands out one unit of work,
// Process calls the function.
type simpleJob SimpleFunc

// oneUnit is the single item every simple Fetch returns; never written.
var oneUnit = []struct{}{{}}

func (simpleJob) Fetch(context.Context, Shard) ([]struct{}, error) { return oneUnit, nil }

// Process calls the function. A run the item timeout cancelled fails with
// the *TimeoutError, whatever the function returned.
func (f simpleJob) Process(ctx context.Context, shard Shard, _ struct{}) error {
	err := f(ctx, shard)
	if te := itemTimeoutCause(ctx); te != nil {
		return te
	}
	return err
}

// Package dataflowtest runs a job's shard items once, synchronously, for
// the job's own tests, as river's rivertest does for a worker: on a Node
// over the embedded store (memstore), so the job goes through the same
// config validation, sharding, Shard fields (item parameters, fencing
// epoch, server id), pipeline, item timeouts, error policy and error
// handler as in production. Run it against a Postgres table too: the jobs
// of sources/postgres are BatchJobs (RunBatch), and package integration
// starts a Postgres for tests.
//
// Each call uses its own in-memory store and Node, stopped before it
// returns: calls are independent and may run in parallel.
package dataflowtest

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
)

// ServerID is the server id of the Node a run is hosted on: the ServerID of
// every Shard the job is handed.
const ServerID = "dataflowtest"

// Options adjust a run. The zero value is ready to use.
type Options struct {
	// ErrorHandler is the Node's (dataflow.NodeConfig.ErrorHandler).
	// Default nil.
	ErrorHandler dataflow.ErrorHandler
	// Logger receives the Node's logs. Default: discarded (the result
	// carries every item's first error).
	Logger *slog.Logger
}

// Run runs every shard item of job once (cfg.ShardingTotalCount items,
// fetching again while cfg.StreamingProcess finds more) and returns the
// run's result: the success and failure counts, and per item its counts
// and first error (RunResult.Items, in item order). cfg.Cron is ignored.
// The error is a bad cfg (naming the field), or ctx.Err() when ctx ends
// first (the run is cancelled and waited for).
func Run[T any](ctx context.Context, cfg dataflow.JobConfig, job dataflow.Job[T], opts ...Options) (dataflow.RunResult, error) {
	return run(ctx, cfg, opts, func(ctx context.Context, n *dataflow.Node, cfg dataflow.JobConfig, o dataflow.JobOption) error {
		return dataflow.AddJob(ctx, n, cfg, job, o)
	})
}

// RunBatch is Run for a BatchJob, such as the jobs of sources/postgres.
func RunBatch[T any](ctx context.Context, cfg dataflow.JobConfig, job dataflow.BatchJob[T], opts ...Options) (dataflow.RunResult, error) {
	return run(ctx, cfg, opts, func(ctx context.Context, n *dataflow.Node, cfg dataflow.JobConfig, o dataflow.JobOption) error {
		return dataflow.AddBatchJob(ctx, n, cfg, job, o)
	})
}

// RunSimple is Run for a simple job's function.
func RunSimple(ctx context.Context, cfg dataflow.JobConfig, fn dataflow.SimpleFunc, opts ...Options) (dataflow.RunResult, error) {
	return run(ctx, cfg, opts, func(ctx context.Context, n *dataflow.Node, cfg dataflow.JobConfig, o dataflow.JobOption) error {
		return dataflow.AddSimpleJob(ctx, n, cfg, fn, o)
	})
}

type add func(ctx context.Context, n *dataflow.Node, cfg dataflow.JobConfig, o dataflow.JobOption) error

func run(ctx context.Context, cfg dataflow.JobConfig, opts []Options, addJob add) (res dataflow.RunResult, err error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	sess := memstore.NewServer().Connect()
	defer sess.Close()
	n, err := dataflow.NewNode(dataflow.NodeConfig{Store: sess, Namespace: "dataflowtest", ServerID: ServerID, Logger: o.Logger, ErrorHandler: o.ErrorHandler})
	if err != nil {
		return res, fmt.Errorf("dataflowtest: %w", err)
	}
	defer func() {
		if serr := n.StopAndCancel(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("dataflowtest: stopping the node: %w", serr)
		}
	}()
	cfg.Cron = "" // runs only when triggered: once, below
	done := make(chan dataflow.RunResult, 1)
	if err := addJob(ctx, n, cfg, dataflow.WithListeners(afterRun(done))); err != nil {
		return res, fmt.Errorf("dataflowtest: %w", err)
	}
	if err := n.Start(ctx); err != nil {
		return res, fmt.Errorf("dataflowtest: %w", err)
	}
	if err := n.TriggerLocal(cfg.JobName); err != nil {
		return res, fmt.Errorf("dataflowtest: %w", err)
	}
	select {
	case res = <-done:
		return res, nil
	case <-ctx.Done():
		return res, ctx.Err()
	}
}

// afterRun hands the first run's result to its channel.
type afterRun chan dataflow.RunResult

func (afterRun) BeforeRun(context.Context, dataflow.RunInfo) {}

func (a afterRun) AfterRun(_ context.Context, _ dataflow.RunInfo, res dataflow.RunResult) {
	select {
	case a <- res:
	default:
	}
}

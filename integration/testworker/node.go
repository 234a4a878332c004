package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
)

// jobConfig builds the job's config from the flags.
func jobConfig(o options) dataflow.JobConfig {
	return dataflow.JobConfig{
		JobName:                          o.job,
		Cron:                             o.cron,
		ShardingTotalCount:               o.total,
		FetchDataCount:                   o.batch,
		ConcurrentDataProcessThreadCount: o.threads,
		StreamingProcess:                 o.streaming,
		Failover:                         o.failover,
		DisableMisfire:                   !o.misfire,
		Overwrite:                        o.overwrite,
		// Errors are reported as events by the job itself.
		ErrorPolicy: dataflow.ErrorPolicyIgnore,
		// Counts are irrelevant to the fault suites; keep the writes rare.
		ProcessCountInterval: time.Minute,
		ReconcileInterval:    5 * time.Second,
	}
}

// runListener turns the Node's run callbacks into the job's run bookkeeping:
// a run's start makes earlier item runs stale, its end closes the item runs
// it left open ("end" events with reason "done", or "cancelled" when the
// run's context ended: ownership lost or a hard stop).
// It also keeps the current run's start (started) for the once callbacks,
// which the Node calls after BeforeRun on the same goroutine.
type runListener struct {
	job     *tickJob
	started *atomic.Int64
}

// BeforeRun implements dataflow.JobListener.
func (l runListener) BeforeRun(_ context.Context, info dataflow.RunInfo) {
	l.started.Store(info.Started.UnixMilli())
	l.job.runStarted()
}

// AfterRun implements dataflow.JobListener.
func (l runListener) AfterRun(ctx context.Context, _ dataflow.RunInfo, _ dataflow.RunResult) {
	reason := "done"
	if ctx.Err() != nil {
		reason = "cancelled"
	}
	l.job.runEnded(reason)
}

// startNode hosts the job on a dataflow.Node over st and starts it. The
// previous incarnation of this server id may still hold its session (a
// restart right after a crash): AddJob is retried on protocol.ErrServerIDInUse
// until that session expires or ctx ends. The caller stops the Node.
func startNode(ctx context.Context, st store.Store, o options, em *emitter, job *tickJob, logger *slog.Logger) (*dataflow.Node, error) {
	node, err := dataflow.NewNode(dataflow.NodeConfig{
		Store:     st,
		Namespace: o.namespace,
		ServerID:  o.serverID,
		Logger:    logger,
		OnError: func(_ string, err error) {
			em.errorf(err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("new node: %w", err)
	}
	started := new(atomic.Int64)
	opts := []dataflow.JobOption{dataflow.WithListeners(runListener{job: job, started: started})}
	if o.once {
		opts = append(opts, dataflow.WithOnceListeners(dataflow.OnceListener{
			BeforeAll: func(context.Context) error {
				em.emit(event{Ev: "once", Phase: "started", Run: started.Load()})
				return nil
			},
			AfterAll: func(context.Context) error {
				em.emit(event{Ev: "once", Phase: "completed", Run: started.Load()})
				return nil
			},
			StartedTimeout:   o.onceTimeout,
			CompletedTimeout: o.onceTimeout,
		}))
	}
	for {
		err = dataflow.AddJob[tick](ctx, node, jobConfig(o), job, opts...)
		if err == nil {
			break
		}
		if !errors.Is(err, protocol.ErrServerIDInUse) || ctx.Err() != nil {
			_ = node.Stop(context.Background())
			return nil, fmt.Errorf("add job %s: %w", o.job, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := node.Start(ctx); err != nil {
		_ = node.Stop(context.Background())
		return nil, fmt.Errorf("start node: %w", err)
	}
	return node, nil
}

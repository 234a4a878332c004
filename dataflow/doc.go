// Package dataflow runs sharded batch jobs across a fleet of processes: each
// job's work is split into shard items (JobConfig.ShardingTotalCount), the
// items are shared among the live processes, and on every cron fire each
// process works through the items it owns. An item moves to another process
// when its owner stops or crashes.
//
// A process creates one Node on a coordination store (NodeConfig.Store:
// zkstore for ZooKeeper, pgstore for Postgres, memstore in one process),
// adds its jobs and starts it:
//
//	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, ServerID: podName})
//	err = dataflow.AddJob[Order](ctx, node, cfg, orders{db})
//	err = node.Start(ctx) // the end of ctx begins a graceful stop
//	defer node.Stop(stopCtx)
//
// A job is a Job[T] (Fetch items of a shard item, then Process each), a
// BatchJob[T] (ProcessBatch per slice; the sources of sources/postgres
// build these) or a SimpleFunc (one call per item). Every call gets the
// Shard it works for: the item, its parameters, and the fencing epoch and
// CheckOwnership to call before committing an effect.
//
// # Errors: what stops what
//
// An error of user code never stops the Node:
//   - a row (one item of a Fetch): Process's error, or one row's error
//     inside a source's function, counts one failure of that item and the
//     others go on. A source that tracks attempts (sources/postgres) counts
//     one attempt and fails the row after its MaxAttempts, unless the error
//     is infrastructure's (a lost connection, a timeout, a cancelled
//     context: postgres.Classify), which counts no attempt and backs the
//     item off. Permanent and RetryAfter override that classification, in
//     the job's code or in NodeConfig.ErrorHandler.
//   - a shard item's run: Fetch's error, ProcessBatch's error for its
//     slice, or ItemTimeout passing end that item's run in this trigger;
//     the next trigger runs it again.
//   - a run: only losing the items (the context given to Fetch and Process
//     is cancelled) or a stop. The run's errors go to the job's error
//     policy (JobConfig.ErrorPolicy) and, under ErrorPolicyReturn, to the
//     listeners (RunResult.Err) and NodeConfig.OnError.
//
// # Observing
//
// NodeConfig.Metrics registers Prometheus metrics (listed in its doc),
// NodeConfig.History records every item's run, and NodeConfig.TracerProvider
// traces runs with OpenTelemetry under the instrumentation name
// "github.com/shardflow/shardflow/dataflow": a span shardflow.run per run on
// a server, under it shardflow.item per shard item, under that
// shardflow.fetch per Fetch and shardflow.process per fetched batch. The
// contexts given to Fetch and Process carry the fetch or process span, so
// the user's own spans nest under them. Attributes: shardflow.job,
// shardflow.server, shardflow.source, shardflow.items, shardflow.item,
// shardflow.epoch, shardflow.failover, shardflow.batch_size,
// shardflow.success, shardflow.failure. Node.Ready is a readiness check
// (package health serves it).
//
// # Testing
//
// Package dataflow/dataflowtest runs a job's items once, synchronously, on
// the embedded store, and returns the counts and each item's first error.
package dataflow

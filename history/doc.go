// Package history records what ran where: one Record per shard item run
// (job, server, item, fencing epoch, source, begin, end, counts and the
// first error), as ElasticJob's JOB_EXECUTION_LOG does.
//
// The dataflow Node hands every item run to a Recorder (NodeConfig.History).
// A Recorder must never block a run, so the usual one is a Buffer: a bounded
// in-memory queue drained by one goroutine that writes batches through a
// Writer (history/pghistory writes them to Postgres with COPY). When the
// Writer is slow or down the Buffer keeps what fits and drops the rest,
// counting the drops (a metric, and one log line per interval).
//
// Memory is an in-process Recorder and Reader for the embedded demo and
// tests; pghistory.Store is the Postgres Reader behind `shardflow history`.
package history

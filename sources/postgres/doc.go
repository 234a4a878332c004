// Package postgres is a typed shardflow source over a Postgres table, on
// jackc/pgx/v5.
//
// # Rows and shard items
//
// Migrate adds bookkeeping columns to the user's table, named
// shardflow_bucket, shardflow_status, shardflow_claimed_by,
// shardflow_claim_epoch, shardflow_claimed_at, shardflow_attempts and
// shardflow_last_error by default (TableSpec.Bookkeeping renames them), and
// marks each with a column comment. The source writes no other column of
// the table, and never a column of one of those names that Migrate did not
// create: Migrate and NewSource refuse it with ErrColumnTaken, naming the
// column and the fix. A table prepared by an earlier build (columns named
// status, bucket, ...) is refused with ErrLegacyColumns; RenameLegacyColumns
// renames its columns in place.
//
// Every row carries a stored bucket, 0..NumBuckets-1, computed from its key
// by a generated column: ((key % 1024) + 1024) % 1024. Being generated, it
// is filled in by Postgres for rows the application inserts later with a
// plain INSERT (the status defaults to 'pending', the attempts to 0), so
// such rows are picked up by the next fetch. Modulo keeps sequential keys
// evenly spread over the buckets, the double modulo keeps negative keys in
// range, and because the bucket is stored a new ShardingTotalCount moves no
// row between buckets. Shard item i of n owns the contiguous bucket range
// [i*1024/n, (i+1)*1024/n) (see BucketRange), so every query of an item is
// a range scan of one index: (key, bucket) WHERE status = 'pending' for
// the pending rows of the claim and transactional modes (read in key
// order: an item's buckets are runs of consecutive keys, so a batch's rows
// share a few heap pages), (status, bucket, key) WHERE status IN
// ('pending','claimed') for the claim mode's sweep of abandoned claims,
// (bucket, key) for the checkpoint mode. Validate (run by
// NewSource) refuses a table that lacks them, naming the missing table,
// column or index and the fix, and checks that every field of T can hold
// its column's SQL type.
//
// # Modes
//
// A Source[T] scans rows into T with pgx.RowToStructByName and offers three
// dataflow.BatchJob[Row[T]] wrappers:
//
//   - Claim: at-least-once. Fetch claims a batch in one statement
//     (UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING) and
//     reclaims the item's rows claimed by a dead or stale claimer; the
//     done and failure marks are batched and guarded by the claim
//     (claimed_by and claim_epoch), so a stale claimer cannot overwrite
//     newer state. A row whose processing fails is retried up to
//     MaxAttempts times, then marked 'failed' with its error.
//   - Transactional: exactly-once effects for effects written in the same
//     database. Each processed slice is one transaction: the rows are
//     locked (FOR UPDATE SKIP LOCKED, re-checked pending) and marked done,
//     the user's function writes its effects with the transaction,
//     Shard.CheckOwnership is consulted, the fencing row is written and
//     the transaction commits once. Two round trips to Postgres per
//     slice: BEGIN with the statement that reads the rows, locks them and
//     marks them done, sent by the batch's Fetch (with several workers per
//     item one transaction per slice, the engine cutting the batch where
//     the Fetch did: TxJob.Slices); the fencing row and COMMIT in the
//     other. When the coordination store is
//     coord/pgstore in the same database, the ownership is checked inside
//     that transaction instead, by the statement writing the fencing row
//     (the coordination rows it read locked until the commit), and the
//     store is asked only at an item run's first batch or after its
//     ownership's nodes changed; nothing to configure (see FenceTx).
//   - Checkpoint: read-only tables read by keyset on (bucket, key); the
//     position of each item is a row of shardflow_checkpoint committed in
//     the same transaction as the sink's writes, fenced the same way.
//
// # Errors
//
// Classify sorts every error: a statement or infrastructure error
// (undefined table, insufficient privilege, lost connection, disk full,
// serialization failure...) consumes no row attempt; the rows go back and
// the item retries the batch with capped exponential backoff
// (Config.MaxBackoff), reporting each step once: one ERROR line and
// dataflow.Shard.ReportError (the server's lastError in status). Only row
// errors (the job's function, data exceptions, constraint violations)
// count attempts. ListFailed and Requeue (and `shardflow failed`) list
// and requeue the rows marked 'failed'. A row that cannot be read into T
// (ReadError: NULL into a field that cannot hold it, a value out of range
// or undecodable) is set aside at once, never a wall for the rest of its
// item: marked 'failed' (claim, transactional) or dead-lettered
// (checkpoint); NewSource warns about nullable columns whose field cannot
// hold NULL.
//
// # Fencing
//
// shardflow_fence(job, item, epoch) holds the highest epoch that committed
// for an item. A commit upserts its own epoch only where the stored one is
// not newer, except the transactional mode's commits at an epoch the source
// has committed there before: they lock the row FOR SHARE, and only while
// it holds their epoch, so the slices of one item commit side by side while
// a newer epoch's upsert waits for them. A newer epoch committed there
// makes the transaction roll back with ErrFenced (sent with the COMMIT, as
// the transactional mode does, the fencing statement then fails, so the
// COMMIT is not run). Together with the row locks this gives zero
// duplicate effects even for a process paused past its session timeout.
//
// # Threading
//
// Source and the jobs it returns are safe for concurrent use: the dataflow
// Node calls Fetch and ProcessBatch for different items concurrently and
// ProcessBatch for several slices of one item concurrently.
package postgres

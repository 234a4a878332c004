package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardflow/shardflow/dataflow"
)

// FenceTx is the fencing step before committing tx on behalf of shard: it
// asks the coordination protocol (shard.CheckOwnership) whether this run
// still owns the item, then records shard.Epoch in shardflow_fence unless a
// newer epoch has already committed there. Either failure returns an error
// wrapping ErrFenced; the caller must roll back. The fence row stays locked
// until tx ends, so commit right after.
//
// Call it yourself when you commit a sink's writes in your own
// transaction. The modes of this package call it too, except that in a
// database shared with coord/pgstore they check ownership inside the
// batch's transaction instead (see Source's doc).
func FenceTx(ctx context.Context, tx pgx.Tx, shard dataflow.Shard) error {
	if err := shard.CheckOwnership(ctx); err != nil {
		return fmt.Errorf("%w: job %s item %d epoch %d: %w", ErrFenced, shard.JobName, shard.Item, shard.Epoch, err)
	}
	return writeFence(ctx, tx, shard)
}

// writeFence records shard.Epoch in shardflow_fence unless a newer epoch
// has already committed there (then ErrFenced).
func writeFence(ctx context.Context, tx pgx.Tx, shard dataflow.Shard) error {
	tag, err := tx.Exec(ctx, fenceSQL, shard.JobName, shard.Item, shard.Epoch)
	if err != nil {
		return fmt.Errorf("sources/postgres: writing the fence of job %s item %d: %w", shard.JobName, shard.Item, err)
	}
	if tag.RowsAffected() == 0 {
		return refusedErr(shard)
	}
	return nil
}

// refusedErr is the ErrFenced of a fence row holding a newer epoch than
// shard's.
func refusedErr(shard dataflow.Shard) error {
	return fmt.Errorf("%w: job %s item %d: epoch %d is older than the last committed one in %s",
		ErrFenced, shard.JobName, shard.Item, shard.Epoch, fenceTable)
}

// fenceRefusedMark names the failure fenceCommitSQL raises when the fence
// row holds a newer epoch.
const fenceRefusedMark = "shardflow_fence refused the epoch"

// fenceCommitSQL is the CommitQuery of a batch that writes its fence row
// in its commit's round trip: fenceSQL for shard's job, item and epoch,
// made to fail when it writes no row (a newer epoch has committed there),
// then COMMIT. pgx sends a CommitQuery as one simple-protocol query
// without arguments, so the values are literals; when the fence fails,
// Postgres skips the COMMIT and the transaction rolls back. SQL has no
// RAISE: the failure is a cast of a text naming it to integer, which
// depends on the row count, so the planner cannot fold it into a failure
// of every execution.
func fenceCommitSQL(shard dataflow.Shard) string {
	return `WITH w AS (INSERT INTO shardflow_fence AS f (job, item, epoch) VALUES (` +
		quoteLiteral(shard.JobName) + `, ` + strconv.Itoa(shard.Item) + `, ` + strconv.FormatInt(shard.Epoch, 10) + `)
ON CONFLICT (job, item) DO UPDATE SET epoch = EXCLUDED.epoch WHERE f.epoch <= EXCLUDED.epoch RETURNING 1)
SELECT CASE WHEN count(*) = 1 THEN 0 ELSE ('` + fenceRefusedMark + `: ' || count(*))::int END FROM w;
COMMIT`
}

// fenceRefused reports whether err is fenceCommitSQL's fence failing.
func fenceRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, fenceRefusedMark)
}

// quoteLiteral is s as an SQL string literal, in the escape string form
// (E prefix), which reads the same whatever standard_conforming_strings
// says.
func quoteLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

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
		return fmt.Errorf("%w: job %s item %d: epoch %d is older than the last committed one in %s",
			ErrFenced, shard.JobName, shard.Item, shard.Epoch, fenceTable)
	}
	return nil
}

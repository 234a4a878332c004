package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

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

// fenceCommitSQL is the CommitQuery of a batch that fences in its
// commit's round trip: fenceStatement, then COMMIT. pgx sends a
// CommitQuery as one simple-protocol query without arguments, so the
// values are literals; when the fence fails, Postgres skips the COMMIT and
// the transaction rolls back.
func fenceCommitSQL(shard dataflow.Shard, held bool) string {
	return fenceStatement(shard, held) + ";\nCOMMIT"
}

// fenceStatement is the statement fencing a commit of shard, made to fail
// when a newer epoch has committed in shardflow_fence. held: the source
// has committed shard.Epoch there before (fencedEpochs), so the row is
// only locked FOR SHARE, and only if it still holds that epoch; else the
// epoch is written (fenceSQL), which locks the row FOR NO KEY UPDATE.
//
// The slices of one item at one epoch (several workers per item) thus
// commit side by side instead of one after the other on the row's lock,
// and write no row version, while a newer epoch's write still waits for
// every slice holding the row FOR SHARE, and every slice that locks the
// row after that write sees the newer epoch (the lock re-reads the row's
// latest version) and is refused.
//
// SQL has no RAISE: the failure is a cast of a text naming it to integer,
// which depends on the row count, so the planner cannot fold it into a
// failure of every execution.
func fenceStatement(shard dataflow.Shard, held bool) string {
	job, item, epoch := quoteLiteral(shard.JobName), strconv.Itoa(shard.Item), strconv.FormatInt(shard.Epoch, 10)
	fail := `('` + fenceRefusedMark + `: ' || count(*))::int`
	if held {
		return `WITH k AS (SELECT 1 FROM shardflow_fence WHERE job = ` + job + ` AND item = ` + item + ` AND epoch = ` + epoch + ` FOR SHARE)
SELECT CASE WHEN count(*) = 1 THEN 0 ELSE ` + fail + ` END FROM k`
	}
	return `WITH w AS (INSERT INTO shardflow_fence AS f (job, item, epoch) VALUES (` + job + `, ` + item + `, ` + epoch + `)
ON CONFLICT (job, item) DO UPDATE SET epoch = EXCLUDED.epoch WHERE f.epoch <= EXCLUDED.epoch RETURNING 1)
SELECT CASE WHEN count(*) = 1 THEN 0 ELSE ` + fail + ` END FROM w`
}

// fencedEpochs remember, per job and item, the epoch a source last
// committed in shardflow_fence, so that its later commits at that epoch
// lock the row FOR SHARE instead of writing it (fenceStatement).
type fencedEpochs struct {
	mu sync.Mutex
	m  map[fenceKey]int64
}

type fenceKey struct {
	job  string
	item int
}

// held reports whether shard.Epoch is the epoch last committed for its
// item.
func (f *fencedEpochs) held(shard dataflow.Shard) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[fenceKey{shard.JobName, shard.Item}]
	return ok && e == shard.Epoch
}

// committed records that a commit fenced at shard.Epoch.
func (f *fencedEpochs) committed(shard dataflow.Shard) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) > 4096 {
		f.m = map[fenceKey]int64{}
	}
	f.m[fenceKey{shard.JobName, shard.Item}] = shard.Epoch
}

// refused forgets shard's item: its next commit writes the fence row (which
// refuses it again if a newer epoch is there, or writes it back if the
// row is gone).
func (f *fencedEpochs) refused(shard dataflow.Shard) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, fenceKey{shard.JobName, shard.Item})
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

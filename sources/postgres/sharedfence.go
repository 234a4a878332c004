package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
)

// One database, one transaction. When the coordination store is
// coord/pgstore in the source's own database, the fencing check of a batch
// is a statement of the batch's transaction instead of a round trip to the
// store per batch: the first batch of an item's run asks the protocol
// (Shard.CheckOwnership) with a store.ReadLog, which records the nodes the
// check read and the session it ran under; every batch then verifies, in
// the statement that writes its fence row, that those nodes are unchanged
// (same czxid and mzxid) and the session alive by the database's clock,
// locking them (FOR SHARE; the session row FOR KEY SHARE, which heartbeats
// do not conflict with) until it commits. A coordination write that would
// move the item (a reshard rewriting the server's sharding node, a failover,
// a session reaped) waits for the batch's commit, or the batch sees it and
// commits nothing: the check holds at commit, not just before it. Only
// when a node changed is the protocol asked again.
//
// The source learns that the store shares its database from the ReadLog
// itself: pgstore names its tree by the database's system identifier,
// database and schema (pgstore.Store.Origin), which the source compares
// with its own pool's. On ZooKeeper, memstore or a pgstore in another
// database nothing is recorded or the origins differ, and FenceTx's
// separate check runs as before.

// fenceIdleTimeout bounds how long a transaction holding the coordination
// rows' locks may sit idle before its commit (a process stopped between its
// fence and its commit): Postgres ends such a session and its locks, so a
// stopped worker cannot hold the coordination writes that wait on them for
// longer. A live worker commits right after the fence.
var fenceIdleTimeout = 5 * time.Second

// guard is what a passing ownership check read from a pgstore tree in the
// source's database: the nodes (existing ones with their czxid and mzxid,
// and the absent ones) and the session.
type guard struct {
	epoch   int64 // the Shard's epoch the check passed for
	schema  string
	session int64
	paths   []string
	czxids  []int64
	mzxids  []int64
	absent  []string
	sql     string
}

// guards caches the last guard per job and item (one entry per item: a run
// at a new epoch replaces it).
type guards struct {
	mu sync.Mutex
	m  map[guardKey]*guard
}

type guardKey struct {
	job         string
	item, total int
}

func (g *guards) get(shard dataflow.Shard) *guard {
	g.mu.Lock()
	defer g.mu.Unlock()
	gd := g.m[guardKey{shard.JobName, shard.Item, shard.Total}]
	if gd == nil || gd.epoch != shard.Epoch {
		return nil
	}
	return gd
}

func (g *guards) put(shard dataflow.Shard, gd *guard) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[guardKey]*guard{}
	}
	k := guardKey{shard.JobName, shard.Item, shard.Total}
	if gd == nil {
		delete(g.m, k)
		return
	}
	g.m[k] = gd
}

// dbOrigin is the source's database identity (pgstore.FormatOrigin without
// the schema), read once.
type dbOrigin struct {
	mu     sync.Mutex
	prefix string
	// granted: per coordination schema, whether the pool's role may read
	// and lock its nodes and sessions (else the separate check is used).
	granted map[string]bool
}

// grantedSQL: may the role use schema $2 and select and lock (UPDATE
// privilege) both tables $1. The CASE keeps the table checks, which fail on
// a schema the role may not use, from running before the schema's.
const grantedSQL = `SELECT CASE
	WHEN NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $2) THEN false
	WHEN NOT has_schema_privilege($2, 'USAGE') THEN false
	ELSE coalesce((SELECT bool_and(has_table_privilege(t, 'SELECT') AND has_table_privilege(t, 'UPDATE'))
		FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NOT NULL HAVING count(*) = 2), false)
	END`

// mayLock reports, once per schema, whether the pool's role may read and
// lock schema's nodes and sessions tables (with tx).
func (s *Source[T]) mayLock(ctx context.Context, tx pgx.Tx, schema string) (bool, error) {
	o := &s.origin
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok, known := o.granted[schema]; known {
		return ok, nil
	}
	q := pgx.Identifier{schema}.Sanitize()
	var ok bool
	if err := tx.QueryRow(ctx, grantedSQL, []string{q + ".nodes", q + ".sessions"}, schema).Scan(&ok); err != nil {
		return false, err
	}
	if !ok {
		s.cfg.Logger.Warn("sources/postgres: the coordination schema is in this database but the source's role may not read and lock its nodes and sessions tables; "+
			"each batch checks its ownership with the store instead (grant SELECT, UPDATE on both to check it in the batch's transaction)", "schema", schema)
	}
	if o.granted == nil {
		o.granted = map[string]bool{}
	}
	o.granted[schema] = ok
	return ok, nil
}

// originPrefix reads it with tx (the caller's: a connection of its own
// could wait for a pool held by the batches waiting for it).
func (s *Source[T]) originPrefix(ctx context.Context, tx pgx.Tx) (string, error) {
	o := &s.origin
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.prefix != "" {
		return o.prefix, nil
	}
	var sysid int64
	var db string
	if err := tx.QueryRow(ctx, pgstore.OriginSQL).Scan(&sysid, &db); err != nil {
		return "", err
	}
	o.prefix = pgstore.FormatOrigin(sysid, db, "")
	return o.prefix, nil
}

// guardFrom returns the guard log's reads make for shard when they were
// recorded by a pgstore in the source's database (tx's), else nil.
func (s *Source[T]) guardFrom(ctx context.Context, tx pgx.Tx, shard dataflow.Shard, log *store.ReadLog) (*guard, error) {
	origin, session, reads, ok := log.Reads()
	if !ok || session == 0 || !strings.HasPrefix(origin, "pgstore:") {
		return nil, nil
	}
	prefix, err := s.originPrefix(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("sources/postgres: reading the database's identity: %w", err)
	}
	schema, ok := strings.CutPrefix(origin, prefix)
	if !ok || schema == "" {
		return nil, nil
	}
	if ok, err := s.mayLock(ctx, tx, schema); err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("sources/postgres: reading the grants on coordination schema %s: %w", schema, err)
		}
		return nil, err
	}
	g := &guard{epoch: shard.Epoch, schema: schema, session: session}
	for _, r := range reads {
		if !r.Exists {
			g.absent = append(g.absent, r.Path)
			continue
		}
		g.paths = append(g.paths, r.Path)
		g.czxids = append(g.czxids, r.Stat.Czxid)
		g.mzxids = append(g.mzxids, r.Stat.Mzxid)
	}
	g.sql = strings.ReplaceAll(sharedFenceSQL, "{coord}", pgx.Identifier{schema}.Sanitize())
	return g, nil
}

// sharedFenceSQL checks a guard and writes the fence row in one statement:
// $1 job, $2 item, $3 epoch, $4 session, $5..$7 the nodes read (path,
// czxid, mzxid), $8 the nodes read absent, $9 fenceIdleTimeout in ms. It
// returns whether the guard held and whether the fence row was written
// (not when a newer epoch committed there). The locks taken are held until
// the transaction ends.
const sharedFenceSQL = `WITH sess AS (
	SELECT s.id FROM {coord}.sessions s WHERE s.id = $4 AND s.expires_at > clock_timestamp() FOR KEY SHARE OF s
), held AS (
	SELECT n.path FROM {coord}.nodes n
	JOIN unnest($5::text[], $6::bigint[], $7::bigint[]) AS g(path, czxid, mzxid)
		ON n.path = g.path AND n.czxid = g.czxid AND n.mzxid = g.mzxid
	FOR SHARE OF n
), owned AS (
	SELECT (SELECT count(*) FROM sess) = 1
		AND (SELECT count(*) FROM held) = cardinality($5::text[])
		AND NOT EXISTS (SELECT 1 FROM {coord}.nodes a WHERE a.path = ANY($8::text[])) AS ok
), fenced AS (
	INSERT INTO shardflow_fence AS f (job, item, epoch) SELECT $1, $2, $3 FROM owned WHERE owned.ok
	ON CONFLICT (job, item) DO UPDATE SET epoch = EXCLUDED.epoch WHERE f.epoch <= EXCLUDED.epoch
	RETURNING 1
)
SELECT (SELECT ok FROM owned), (SELECT count(*) FROM fenced) = 1, set_config('idle_in_transaction_session_timeout', $9, true)`

// check runs the guard's statement in tx: owned reports the guard held,
// fenced that the fence row took the epoch.
func (g *guard) check(ctx context.Context, tx pgx.Tx, shard dataflow.Shard) (owned, fenced bool, err error) {
	var idle string
	err = tx.QueryRow(ctx, g.sql, shard.JobName, shard.Item, shard.Epoch, g.session,
		g.paths, g.czxids, g.mzxids, g.absent, strconv.FormatInt(fenceIdleTimeout.Milliseconds(), 10)).Scan(&owned, &fenced, &idle)
	if err != nil {
		return false, false, fmt.Errorf("sources/postgres: checking the ownership of job %s item %d in the batch's transaction: %w", shard.JobName, shard.Item, err)
	}
	return owned, fenced, nil
}

// fence is FenceTx for the source's own transactions: in a database shared
// with the coordination store it checks ownership in tx (see above), else
// it is FenceTx.
func (s *Source[T]) fence(ctx context.Context, tx pgx.Tx, shard dataflow.Shard) error {
	owed, err := s.checkFence(ctx, tx, shard)
	if err != nil || !owed {
		return err
	}
	return writeFence(ctx, tx, shard)
}

// Fencing the source has seen (Source.fenceMode): fenceInCommit says
// whether a batch may write its fence row in its commit's round trip.
const (
	fenceUnknown int32 = iota
	fencePlain         // checkFence has left the fence row to its caller
	fenceGuarded       // a check in a shared database has been made
)

// fenceInCommit reports whether shard's next batch should send its fence
// row with its COMMIT (fenceCommitSQL): the source has fenced without a
// coordination guard and has none for shard. Either way a batch is fenced
// exactly once before its commit; a wrong guess costs a round trip (the
// fence row written on its own) or a second write of the same epoch.
func (s *Source[T]) fenceInCommit(shard dataflow.Shard) bool {
	return s.fenceMode.Load() == fencePlain && s.guards.get(shard) == nil
}

// batchTxOptions are the options of a transactional batch's transaction:
// when the source fences in the commit (inCommit, fenceInCommit) its
// CommitQuery fences, locking the row FOR SHARE at an epoch the source has
// committed there (fencedEpochs).
func (s *Source[T]) batchTxOptions(shard dataflow.Shard) (opts pgx.TxOptions, inCommit bool) {
	if inCommit = s.fenceInCommit(shard); inCommit {
		opts.CommitQuery = fenceCommitSQL(shard, s.fenced.held(shard))
	}
	return opts, inCommit
}

// checkFence is the fencing step before committing tx, but for writing the
// fence row when no guard does: in a database shared with the coordination
// store it checks ownership and writes the fence row in tx (owed false);
// else it asks the protocol (shard.CheckOwnership) and owed is true: the
// caller writes shard's epoch in shardflow_fence in tx before committing
// (writeFence, or fenceCommitSQL).
func (s *Source[T]) checkFence(ctx context.Context, tx pgx.Tx, shard dataflow.Shard) (owed bool, err error) {
	if g := s.guards.get(shard); g != nil {
		owned, fenced, err := g.check(ctx, tx, shard)
		if err != nil {
			return false, err
		}
		if owned {
			return false, fencedErr(shard, fenced)
		}
		// A node read by the check changed (or the session ended): ask the
		// protocol again.
		s.guards.put(shard, nil)
	}
	log := &store.ReadLog{}
	if err := shard.CheckOwnership(store.WithReadLog(ctx, log)); err != nil {
		return false, fmt.Errorf("%w: job %s item %d epoch %d: %w", ErrFenced, shard.JobName, shard.Item, shard.Epoch, err)
	}
	g, err := s.guardFrom(ctx, tx, shard, log)
	if err != nil {
		return false, err
	}
	if g == nil {
		s.fenceMode.CompareAndSwap(fenceUnknown, fencePlain)
		return true, nil
	}
	owned, fenced, err := g.check(ctx, tx, shard)
	if err != nil {
		return false, err
	}
	if !owned {
		return false, fmt.Errorf("%w: job %s item %d epoch %d: the coordination nodes of its ownership changed right after the check", ErrFenced, shard.JobName, shard.Item, shard.Epoch)
	}
	s.fenceMode.Store(fenceGuarded)
	s.guards.put(shard, g)
	return false, fencedErr(shard, fenced)
}

// fencedErr is nil when the fence row took shard's epoch, else the
// ErrFenced of a newer epoch already committed there.
func fencedErr(shard dataflow.Shard, fenced bool) error {
	if fenced {
		return nil
	}
	return refusedErr(shard)
}

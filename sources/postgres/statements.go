package postgres

import "strings"

// statements are a Source's SQL, built once from its quoted identifiers.
type statements struct {
	reclaim, claim, done, fail, release, setAside   string // claim mode
	pending, lockDone, lockMark, txFail, txSetAside string // transactional mode
	doneByKey                                       string // claim mode
	keyset, checkpoint                              string // checkpoint mode
}

const fenceSQL = `INSERT INTO shardflow_fence AS f (job, item, epoch) VALUES ($1, $2, $3)
ON CONFLICT (job, item) DO UPDATE SET epoch = EXCLUDED.epoch WHERE f.epoch <= EXCLUDED.epoch`

func buildStatements(spec TableSpec, cols []string) statements {
	b := spec.Bookkeeping
	r := strings.NewReplacer(
		"{t}", spec.ident().Sanitize(),
		"{k}", quote(spec.Key),
		"{cols}", selectList(cols, "t"),
		"{bucket}", quote(b.Bucket),
		"{status}", quote(b.Status),
		"{claimed_by}", quote(b.ClaimedBy),
		"{claim_epoch}", quote(b.ClaimEpoch),
		"{claimed_at}", quote(b.ClaimedAt),
		"{attempts}", quote(b.Attempts),
		"{last_error}", quote(b.LastError),
	)
	return statements{
		// $1 lo, $2 hi, $3 me, $4 epoch, $5 max attempts, $6 lease seconds.
		// Re-evaluated on the latest row version under the row lock, so a
		// claim marked done meanwhile is left alone.
		reclaim: r.Replace(`UPDATE {t} AS t SET
  {status} = CASE WHEN t.{attempts} >= $5 THEN 'failed' ELSE 'pending' END,
  {last_error} = CASE WHEN t.{attempts} >= $5
    THEN 'shardflow: claim abandoned by ' || coalesce(t.{claimed_by}, '?') || ' (epoch ' || coalesce(t.{claim_epoch}::text, '?') || ') after ' || t.{attempts} || ' attempts'
    ELSE t.{last_error} END,
  {claimed_by} = NULL, {claim_epoch} = NULL, {claimed_at} = CASE WHEN t.{attempts} >= $5 THEN now() END
WHERE t.{status} = 'claimed' AND t.{bucket} BETWEEN $1 AND $2
  AND (t.{claimed_by} IS DISTINCT FROM $3 OR t.{claim_epoch} IS DISTINCT FROM $4
       OR t.{claimed_at} < now() - make_interval(secs => $6))`),
		// $1 lo, $2 hi, $3 limit, $4 me, $5 epoch, $6 after bucket, $7 after key.
		// In key order by the pending index, as the transactional mode
		// reads (see pending): a batch's rows share a few heap pages. The
		// locked rows are joined back by ctid (a TID scan: one heap
		// access per row), not by key (a second index descent per row):
		// the lock holds the row, so its ctid stays its current version's
		// until the UPDATE.
		claim: r.Replace(`WITH c AS (
  SELECT ctid FROM {t}
  WHERE {status} = 'pending' AND ({k}, {bucket}) > ($7::bigint, $6::smallint) AND {bucket} BETWEEN $1 AND $2
  ORDER BY {k} LIMIT $3
  FOR UPDATE SKIP LOCKED)
UPDATE {t} AS t SET {status} = 'claimed', {claimed_by} = $4, {claim_epoch} = $5, {claimed_at} = now(), {attempts} = t.{attempts} + 1
FROM c WHERE t.ctid = c.ctid
RETURNING t.{k}, {cols}, t.ctid`),
		// $1 keys, $2 me, $3 epoch, $4 the rows' ctids as claimed, one per
		// key: a TID scan finds each (a row whose version moved
		// since, updated by the job's function, is not found: doneByKey
		// marks it), and its key must be the one claimed there (the slot
		// of a version pruned since may hold another row). Every row
		// matched is one of $1 claimed by this claim, so done. The pairs
		// are joined (a TID scan per pair, its key compared once), not
		// tested with "key = ANY($1)" on each row: under the generic plan
		// that walks the array for every row (EXPLAIN of 1,000 marks: 3.6
		// ms of scan against 1.3 ms). The status test is written "(... )
		// IS TRUE" so that the partial queue index cannot serve it: its
		// entries of rows claimed and since done stay until vacuum, and a
		// plan scanning status = 'claimed' through it reads more of them at
		// every batch of a drain (EXPLAIN: 20,000 buffers per 1,000 marks
		// and growing, against 1,000 + the update's).
		done: r.Replace(`UPDATE {t} AS t SET {status} = 'done', {last_error} = NULL
FROM unnest($4::tid[], $1::bigint[]) AS d(tid, k)
WHERE t.ctid = d.tid AND t.{k} = d.k
  AND (t.{status} = 'claimed') IS TRUE AND t.{claimed_by} = $2 AND t.{claim_epoch} = $3
RETURNING t.{k}`),
		// $1 keys, $2 me, $3 epoch: by key (the primary key, not the queue
		// index; see done).
		doneByKey: r.Replace(`UPDATE {t} AS t SET {status} = 'done', {last_error} = NULL
WHERE t.{k} = ANY($1::bigint[]) AND (t.{status} = 'claimed') IS TRUE AND t.{claimed_by} = $2 AND t.{claim_epoch} = $3`),
		// $1 keys, $2 errors, $3 me, $4 epoch, $5 max attempts.
		fail: r.Replace(`UPDATE {t} AS t SET
  {status} = CASE WHEN t.{attempts} >= $5 THEN 'failed' ELSE 'pending' END,
  {last_error} = f.err,
  {claimed_by} = CASE WHEN t.{attempts} >= $5 THEN t.{claimed_by} END,
  {claim_epoch} = CASE WHEN t.{attempts} >= $5 THEN t.{claim_epoch} END,
  {claimed_at} = CASE WHEN t.{attempts} >= $5 THEN now() END
FROM unnest($1::bigint[], $2::text[]) AS f(k, err)
WHERE t.{k} = f.k AND (t.{status} = 'claimed') IS TRUE AND t.{claimed_by} = $3 AND t.{claim_epoch} = $4`),
		// $1 keys, $2 me, $3 epoch: claims never processed go back unpenalised.
		release: r.Replace(`UPDATE {t} AS t SET {status} = 'pending', {attempts} = greatest(t.{attempts} - 1, 0),
  {claimed_by} = NULL, {claim_epoch} = NULL, {claimed_at} = NULL
WHERE t.{k} = ANY($1::bigint[]) AND (t.{status} = 'claimed') IS TRUE AND t.{claimed_by} = $2 AND t.{claim_epoch} = $3`),

		// $1 keys, $2 errors, $3 me, $4 epoch: claimed rows that cannot be
		// read are marked failed at once (ReadError).
		setAside: r.Replace(`UPDATE {t} AS t SET {status} = 'failed', {last_error} = f.err, {claimed_at} = now()
FROM unnest($1::bigint[], $2::text[]) AS f(k, err)
WHERE t.{k} = f.k AND (t.{status} = 'claimed') IS TRUE AND t.{claimed_by} = $3 AND t.{claim_epoch} = $4`),

		// $1 lo, $2 hi, $3 limit, $4 after key, $5 after bucket (the
		// start, (MinInt64, -1), is before every row). In key order, by the
		// pending index (key, bucket) WHERE status = 'pending': the bucket
		// range is tested on its entries, and an item's buckets are runs of
		// consecutive keys, so a batch's rows share a few heap pages
		// (in (bucket, key) order each row of a batch was on a page of its
		// own, which every later batch pruned and cleaned again).
		pending: r.Replace(`SELECT t.{k}, {cols} FROM {t} AS t
WHERE t.{status} = 'pending' AND (t.{k}, t.{bucket}) > ($4::bigint, $5::smallint) AND t.{bucket} BETWEEN $1 AND $2
ORDER BY t.{k} LIMIT $3`),
		// $1 keys, $2 lo, $3 hi, $4 me, $5 epoch: lock the rows still
		// pending and still this item's (skipping rows another owner holds)
		// and mark them done, in one statement (joined back by ctid, as the
		// claim); the transaction that also holds the job's effects commits
		// or rolls back the mark.
		lockDone: r.Replace(`UPDATE {t} AS t SET {status} = 'done', {claimed_by} = $4, {claim_epoch} = $5, {claimed_at} = now(),
  {attempts} = t.{attempts} + 1, {last_error} = NULL
FROM (SELECT ctid FROM {t}
  WHERE {k} = ANY($1::bigint[]) AND {status} = 'pending' AND {bucket} BETWEEN $2 AND $3
  FOR UPDATE SKIP LOCKED) AS l
WHERE t.ctid = l.ctid
RETURNING t.{k}`),
		// $1 lo, $2 hi, $3 limit, $4 me, $5 epoch, $6 after key, $7 after
		// bucket: pending's read, lockDone's lock and mark, in one
		// statement and one pass (see held.go): the pending index in key
		// order, each row locked (skipping rows another owner holds) and
		// joined back by ctid, marked done and returned. The batch's
		// transaction, opened by the Fetch, commits or rolls back the mark
		// with the job's effects.
		lockMark: r.Replace(`WITH l AS (
  SELECT ctid FROM {t}
  WHERE {status} = 'pending' AND ({k}, {bucket}) > ($6::bigint, $7::smallint) AND {bucket} BETWEEN $1 AND $2
  ORDER BY {k} LIMIT $3
  FOR UPDATE SKIP LOCKED)
UPDATE {t} AS t SET {status} = 'done', {claimed_by} = $4, {claim_epoch} = $5, {claimed_at} = now(),
  {attempts} = t.{attempts} + 1, {last_error} = NULL
FROM l WHERE t.ctid = l.ctid
RETURNING t.{k}, {cols}`),
		// $1 key, $2 error, $3 me, $4 epoch, $5 max attempts.
		txFail: r.Replace(`UPDATE {t} SET {attempts} = {attempts} + 1, {last_error} = $2,
  {status} = CASE WHEN {attempts} + 1 >= $5 THEN 'failed' ELSE 'pending' END,
  {claimed_by} = $3, {claim_epoch} = $4, {claimed_at} = now()
WHERE {k} = $1 AND {status} = 'pending'`),

		// $1 keys, $2 errors, $3 me, $4 epoch, $5 lo, $6 hi: pending rows
		// of the item that cannot be read are marked failed at once.
		txSetAside: r.Replace(`UPDATE {t} AS t SET {status} = 'failed', {last_error} = f.err, {attempts} = t.{attempts} + 1,
  {claimed_by} = $3, {claim_epoch} = $4, {claimed_at} = now()
FROM unnest($1::bigint[], $2::text[]) AS f(k, err)
WHERE t.{k} = f.k AND t.{status} = 'pending' AND t.{bucket} BETWEEN $5 AND $6`),

		// $1 lo, $2 hi, $3 job, $4 limit: per bucket, the rows after its
		// checkpoint; one index probe per bucket of the item.
		keyset: r.Replace(`SELECT t.{k}, {cols} FROM generate_series($1::int, $2::int) AS g(b)
LEFT JOIN shardflow_checkpoint AS c ON c.job = $3 AND c.bucket = g.b
CROSS JOIN LATERAL (
  SELECT * FROM {t} AS x
  WHERE x.{bucket} = g.b AND (c.key IS NULL OR x.{k} > c.key)
  ORDER BY x.{k} LIMIT $4) AS t
ORDER BY t.{bucket}, t.{k} LIMIT $4`),
		// $1 job, $2 buckets, $3 keys, $4 epoch.
		checkpoint: `INSERT INTO shardflow_checkpoint AS c (job, bucket, key, epoch, attempts, last_error)
SELECT $1, u.b, u.k, $4, 0, NULL FROM unnest($2::smallint[], $3::bigint[]) AS u(b, k)
ON CONFLICT (job, bucket) DO UPDATE SET key = EXCLUDED.key, epoch = EXCLUDED.epoch, attempts = 0, last_error = NULL
WHERE c.key < EXCLUDED.key`,
	}
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// schemaVersion is the version of the tables migrate creates; it is stored
// in the schema's meta table, so that Open skips the migration when the
// schema is current or newer.
//
// Versions: 2, multi_batch; 3, multi_batch_v3 (a write renews its
// session's lease). A change to a function the code calls gives it a new
// name rather than replacing it: stores of the previous version share the
// schema during an upgrade, and each calls its own (their migration, run
// again when they open, restores their function and version 2 without
// touching the newer one; the next store of this version to open sets 3
// again).
const schemaVersion = 3

// multiFunc is the function that commits a batch of writes (multiSQL).
const multiFunc = "multi_batch_v3"

// migrationSQL creates the store's tables in schema %[1]s. Every statement
// is idempotent (IF NOT EXISTS, ON CONFLICT DO NOTHING): migrate runs them
// in one transaction under a transaction-level advisory lock, so concurrent
// Opens on an empty database neither fail nor half-create anything.
//
//   - txn: one row holding the last transaction id (zxid). Every write
//     transaction updates it first, which takes the row's lock until it
//     commits: writers are serialized on it, so ids are handed out in commit
//     order (a sequence is not enough: nextval is taken before commit, and a
//     transaction that took a smaller id could commit after one that took a
//     larger id, making a fencing epoch go back).
//   - nodes: the tree. seq counts the node's child creations (the sequential
//     suffix); ephemeral_owner is the owning session (0: persistent).
//   - sessions: live sessions, judged by the database's clock: a session is
//     alive while expires_at > clock_timestamp(); heartbeats move it.
//   - events: the watch events of recent transactions, so that a store whose
//     listening connection dropped fires every watch whose node changed
//     meanwhile (pruned to the last pruneKeep transactions).
const migrationSQL = `
CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE IF NOT EXISTS %[1]s.meta (
	id int PRIMARY KEY CHECK (id = 1),
	version int NOT NULL
);
CREATE TABLE IF NOT EXISTS %[1]s.txn (
	id int PRIMARY KEY CHECK (id = 1),
	zxid bigint NOT NULL
);
INSERT INTO %[1]s.txn (id, zxid) VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS %[1]s.nodes (
	path text PRIMARY KEY,
	parent text NOT NULL,
	data bytea NOT NULL,
	czxid bigint NOT NULL,
	mzxid bigint NOT NULL,
	pzxid bigint NOT NULL,
	ctime timestamptz NOT NULL,
	mtime timestamptz NOT NULL,
	version int NOT NULL DEFAULT 0,
	cversion int NOT NULL DEFAULT 0,
	ephemeral_owner bigint NOT NULL DEFAULT 0,
	num_children int NOT NULL DEFAULT 0,
	seq int NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS nodes_parent ON %[1]s.nodes (parent);
CREATE INDEX IF NOT EXISTS nodes_owner ON %[1]s.nodes (ephemeral_owner) WHERE ephemeral_owner <> 0;
INSERT INTO %[1]s.nodes (path, parent, data, czxid, mzxid, pzxid, ctime, mtime)
	VALUES ('/', '', '', 0, 0, 0, clock_timestamp(), clock_timestamp()) ON CONFLICT DO NOTHING;
CREATE SEQUENCE IF NOT EXISTS %[1]s.session_ids;
CREATE TABLE IF NOT EXISTS %[1]s.sessions (
	id bigint PRIMARY KEY,
	timeout_ms int NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expiry ON %[1]s.sessions (expires_at);
CREATE TABLE IF NOT EXISTS %[1]s.events (
	zxid bigint NOT NULL,
	ord int NOT NULL,
	type smallint NOT NULL,
	path text NOT NULL,
	PRIMARY KEY (zxid, ord)
);
INSERT INTO %[1]s.meta (id, version) VALUES (1, %[2]d)
	ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version;
`

// migrate creates the schema and its tables unless they are current. It
// holds a transaction-level advisory lock keyed by the schema's name, so
// concurrent migrations of one schema run one after the other, and runs
// everything in one transaction: a role without the needed grants gets
// ErrPermission and leaves nothing behind.
func migrate(ctx context.Context, conn *pgx.Conn, schema string) error {
	q := pgx.Identifier{schema}.Sanitize()
	var v int
	err := conn.QueryRow(ctx, "SELECT version FROM "+q+".meta WHERE id = 1").Scan(&v)
	if err == nil && v >= schemaVersion {
		return nil
	}
	if err != nil && !isUndefined(err) && !errors.Is(err, pgx.ErrNoRows) {
		return mapSetupErr(schema, "read the schema version", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return mapSetupErr(schema, "begin the migration", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "shardflow-pgstore:"+schema); err != nil {
		return mapSetupErr(schema, "lock the migration", err)
	}
	// Another Open may have migrated while this one waited for the lock.
	if current, err := versionIn(ctx, tx, q); err != nil {
		return mapSetupErr(schema, "read the schema version", err)
	} else if current {
		return nil
	}
	for _, stmt := range strings.Split(fmt.Sprintf(migrationSQL, q, schemaVersion), ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return mapSetupErr(schema, "migrate", err)
		}
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(multiSQL, q, maxPayload, multiFunc)); err != nil {
		return mapSetupErr(schema, "create the multi function", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return mapSetupErr(schema, "commit the migration", err)
	}
	return nil
}

// versionIn reports, in tx, whether the schema exists at schemaVersion or
// newer (to_regclass: no error, so the transaction stays usable).
func versionIn(ctx context.Context, tx pgx.Tx, q string) (bool, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".meta").Scan(&exists); err != nil || !exists {
		return false, err
	}
	var v int
	err := tx.QueryRow(ctx, "SELECT version FROM "+q+".meta WHERE id = 1").Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return v >= schemaVersion, err
}

// isUndefined reports a missing schema or table (a database never migrated).
func isUndefined(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000")
}

// mapSetupErr names the schema and, for a missing privilege, the grants.
func mapSetupErr(schema, what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("%w: %s of schema %q: %s; %s", ErrPermission, what, schema, pe.Message, grantsHint(schema))
	}
	return fmt.Errorf("pgstore: %s of schema %q: %w", what, schema, err)
}

// grantsHint says which grants the store's role needs (docs/postgres-only.md).
func grantsHint(schema string) string {
	return fmt.Sprintf("the role needs CREATE on the database (to create schema %[1]q) or, with the schema created by an administrator, "+
		"ownership of it or USAGE, CREATE on it and SELECT, INSERT, UPDATE, DELETE on its tables and USAGE on %[1]s.session_ids", schema)
}

// multiSQL creates %[1]s.%[3]s (multiFunc), which commits a batch of Multi
// requests (group commit, see batch.go) in one statement and one
// transaction: the client makes one round trip, and the txn row's lock (see
// migrationSQL) is taken once per batch and held only while the server runs
// it, never across a client's round trips, so a slow or descheduled client
// does not stall every other writer.
//
// Request r has the next p_counts[r] ops of the op arrays and the session
// p_sesss[r]. Each request runs in its own subtransaction (a BEGIN ..
// EXCEPTION block: a savepoint): a refused op raises SF000 "index:reason"
// (index within the request) and an expired session (by the database's
// clock) SF001; either rolls back that request alone and returns one row
// (r_req, r_err) for it, never failing or delaying the others. A live
// session's lease is renewed by its request, as a heartbeat would (never
// shortened), so that a process whose heartbeats are late but whose writes
// commit keeps its session, as ZooKeeper counts every request of a
// session; the renewal rolls back with a refused request (v_live is reset:
// the session's next request renews it again). The session row's lock,
// taken after the txn row's as every writer does, holds a reaper off
// until the batch commits. A request
// that commits takes the next zxid: requests get consecutive zxids in batch
// order, and the batch's commit makes them visible at once, so a later
// commit never carries a smaller id. Every committed request's events are
// recorded and notified under its own zxid, in zxid order. kinds: 0..3
// create with that store.Mode, 4 set, 5 delete, 6 check.
//
// The rows of a request are emitted as its ops apply, so a refused request
// may have emitted some before its error row: the client discards them.
const multiSQL = `
CREATE OR REPLACE FUNCTION %[1]s.%[3]s(p_sesss bigint[], p_counts int[], p_kinds int[], p_paths text[], p_parents text[],
	p_datas bytea[], p_versions int[], p_channel text)
RETURNS TABLE (r_req int, r_err text, r_path text, r_czxid bigint, r_mzxid bigint, r_pzxid bigint, r_ctime timestamptz, r_mtime timestamptz,
	r_version int, r_cversion int, r_owner bigint, r_nchild int)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_z bigint; v_try bigint; v_t timestamptz; v_r int; v_j int; v_i int; v_base int := 0; v_sess bigint; v_live bigint := 0;
	v_k int; v_p text; v_par text; v_own bigint; v_seq int; v_ver int; v_nc int; v_name text;
	v_evt int[]; v_evp text[]; v_payload text;
	v_allz bigint[] := '{}'; v_allt int[] := '{}'; v_allp text[] := '{}';
BEGIN
	UPDATE %[1]s.txn SET zxid = zxid WHERE id = 1 RETURNING zxid INTO v_z;
	FOR v_r IN 1 .. coalesce(array_length(p_counts, 1), 0) LOOP
		v_try := v_z + 1; v_evt := '{}'; v_evp := '{}'; v_sess := p_sesss[v_r];
		BEGIN
			v_t := clock_timestamp();
			IF v_sess <> 0 AND v_sess <> v_live THEN
				UPDATE %[1]s.sessions s SET expires_at = greatest(s.expires_at, v_t + s.timeout_ms * interval '1 millisecond')
					WHERE s.id = v_sess AND s.expires_at > v_t;
				IF NOT FOUND THEN
					RAISE EXCEPTION USING ERRCODE = 'SF001', MESSAGE = '0:session';
				END IF;
				v_live := v_sess;
			END IF;
			FOR v_j IN 1 .. p_counts[v_r] LOOP
				v_i := v_base + v_j;
				v_k := p_kinds[v_i]; v_p := p_paths[v_i]; v_par := p_parents[v_i];
				r_req := v_r; r_err := NULL;
				r_path := v_p; r_czxid := NULL; r_mzxid := NULL; r_pzxid := NULL; r_ctime := NULL; r_mtime := NULL;
				r_version := NULL; r_cversion := NULL; r_owner := NULL; r_nchild := NULL;
				IF v_k <= 3 THEN
					IF v_p = '/' THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':exists';
					END IF;
					SELECT n.ephemeral_owner, n.seq INTO v_own, v_seq FROM %[1]s.nodes n WHERE n.path = v_par;
					IF NOT FOUND THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':noparent';
					END IF;
					IF v_own <> 0 THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':ephemeralchild';
					END IF;
					v_name := v_p;
					IF v_k >= 2 THEN
						v_name := v_p || lpad(v_seq::text, 10, '0');
					END IF;
					INSERT INTO %[1]s.nodes (path, parent, data, czxid, mzxid, pzxid, ctime, mtime, ephemeral_owner)
						VALUES (v_name, v_par, coalesce(p_datas[v_i], ''::bytea), v_try, v_try, v_try, v_t, v_t,
							CASE WHEN v_k = 1 OR v_k = 3 THEN v_sess ELSE 0 END)
						ON CONFLICT (path) DO NOTHING;
					IF NOT FOUND THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':exists';
					END IF;
					UPDATE %[1]s.nodes n SET num_children = n.num_children + 1, cversion = n.cversion + 1, pzxid = v_try, seq = n.seq + 1
						WHERE n.path = v_par;
					v_evt := v_evt || ARRAY[1, 4]; v_evp := v_evp || ARRAY[v_name, v_par];
					r_path := v_name;
				ELSIF v_k = 4 THEN
					UPDATE %[1]s.nodes n SET data = coalesce(p_datas[v_i], ''::bytea), version = n.version + 1, mzxid = v_try, mtime = v_t
						WHERE n.path = v_p AND (p_versions[v_i] = -1 OR n.version = p_versions[v_i])
						RETURNING n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime, n.version, n.cversion, n.ephemeral_owner, n.num_children
						INTO r_czxid, r_mzxid, r_pzxid, r_ctime, r_mtime, r_version, r_cversion, r_owner, r_nchild;
					IF NOT FOUND THEN
						IF EXISTS (SELECT 1 FROM %[1]s.nodes n WHERE n.path = v_p) THEN
							RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':badversion';
						END IF;
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':nonode';
					END IF;
					v_evt := v_evt || 3; v_evp := v_evp || v_p;
				ELSIF v_k = 5 THEN
					SELECT n.version, n.num_children INTO v_ver, v_nc FROM %[1]s.nodes n WHERE n.path = v_p;
					IF NOT FOUND THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':nonode';
					END IF;
					IF p_versions[v_i] <> -1 AND p_versions[v_i] <> v_ver THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':badversion';
					END IF;
					IF v_nc > 0 THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':notempty';
					END IF;
					DELETE FROM %[1]s.nodes n WHERE n.path = v_p;
					UPDATE %[1]s.nodes n SET num_children = n.num_children - 1, cversion = n.cversion + 1, pzxid = v_try WHERE n.path = v_par;
					v_evt := v_evt || ARRAY[2, 4]; v_evp := v_evp || ARRAY[v_p, v_par];
				ELSE
					SELECT n.version INTO v_ver FROM %[1]s.nodes n WHERE n.path = v_p;
					IF NOT FOUND THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':nonode';
					END IF;
					IF p_versions[v_i] <> -1 AND p_versions[v_i] <> v_ver THEN
						RAISE EXCEPTION USING ERRCODE = 'SF000', MESSAGE = v_j::text || ':badversion';
					END IF;
				END IF;
				RETURN NEXT;
			END LOOP;
			-- Reached only when every op applied: the request commits with the batch.
			v_z := v_try;
		EXCEPTION WHEN SQLSTATE 'SF000' OR SQLSTATE 'SF001' THEN
			v_live := 0;
			r_req := v_r; r_err := SQLERRM; r_path := NULL; r_czxid := NULL; r_mzxid := NULL; r_pzxid := NULL; r_ctime := NULL;
			r_mtime := NULL; r_version := NULL; r_cversion := NULL; r_owner := NULL; r_nchild := NULL;
			RETURN NEXT;
		END;
		IF v_z = v_try THEN
			v_allz := v_allz || array_fill(v_z, ARRAY[coalesce(array_length(v_evt, 1), 0)]);
			v_allt := v_allt || v_evt; v_allp := v_allp || v_evp;
			SELECT json_build_object('z', v_z, 'e', coalesce(json_agg(json_build_array(u.t, u.p) ORDER BY u.o), '[]'::json))::text
				INTO v_payload FROM unnest(v_evt, v_evp) WITH ORDINALITY AS u(t, p, o);
			IF octet_length(v_payload) > %[2]d THEN
				v_payload := json_build_object('z', v_z, 'f', true)::text;
			END IF;
			PERFORM pg_notify(p_channel, v_payload);
		END IF;
		v_base := v_base + p_counts[v_r];
	END LOOP;
	UPDATE %[1]s.txn SET zxid = v_z WHERE id = 1;
	IF coalesce(array_length(v_allt, 1), 0) > 0 THEN
		INSERT INTO %[1]s.events (zxid, ord, type, path)
			SELECT u.z, u.o, u.t, u.p FROM unnest(v_allz, v_allt, v_allp) WITH ORDINALITY AS u(z, t, p, o);
	END IF;
END
$fn$`

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
// schema is current.
const schemaVersion = 1

// migrationSQL creates the store's tables in schema %[1]s. Every statement
// is idempotent (IF NOT EXISTS, ON CONFLICT DO NOTHING): migrate runs them
// in one transaction under a transaction-level advisory lock, so concurrent
// Opens on an empty database neither fail nor half-create anything.
//
//   - txn: one row holding the last transaction id (zxid). Every write
//     transaction increments it first, which takes the row's lock until it
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
	if err == nil && v == schemaVersion {
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
	if err := tx.Commit(ctx); err != nil {
		return mapSetupErr(schema, "commit the migration", err)
	}
	return nil
}

// versionIn reports, in tx, whether the schema exists at schemaVersion
// (to_regclass: no error, so the transaction stays usable).
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
	return v == schemaVersion, err
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

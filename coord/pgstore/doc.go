// Package pgstore is a store.Store on Postgres (jackc/pgx/v5): coordination
// for teams that run only Postgres, with ZooKeeper's guarantees as
// coord/storetest states them (docs/postgres-only.md).
//
// The tree lives in one schema (Config.Schema, default "shardflow_coord"),
// created by Open with an idempotent migration that runs in one transaction
// under an advisory lock, so concurrent Opens on an empty database are safe
// and a role without the grants creates nothing (ErrPermission names them).
//
// How each guarantee is made:
//
//   - Transaction ids (Czxid, Mzxid, Pzxid; coord's fencing epochs) follow
//     commit order: every write transaction increments one counter row
//     first, and that row's lock, held until commit, serializes writers.
//     A sequence would not do: nextval is taken before commit, so a
//     transaction could commit after another with a smaller id. Writes are
//     one statement (a function in the schema), so the lock is held only
//     while the server applies them.
//   - Group commit: the writes a store's callers make while its earlier
//     ones commit go in ONE transaction (batch.go), each in its own
//     savepoint with its own zxid, so one's refusal fails no other.
//   - Sessions are rows judged by the database's clock: a session lives
//     while expires_at > clock_timestamp(); a heartbeat every third of the
//     timeout moves it, and so does every committed write of the session
//     (a late heartbeat does not lose a writing session). Any store's heartbeat that sees an expired session
//     reaps it: its ephemeral nodes are deleted in one transaction whose
//     events fire the watches on them. Every write checks its session by
//     the same clock, so a process paused past its timeout commits nothing
//     (store.ErrSessionExpired) and, resumed, reports StateLost and then a
//     new session. A short disconnect resumes the same session.
//   - Watches are one-shot and fire after commit: each write transaction
//     records its events in a table and NOTIFYs them (the zxid alone when
//     they exceed the payload limit). A store listens on one connection,
//     dispatches events in zxid order, and when that connection comes back
//     replays the events it missed from the table; when they were pruned it
//     checks every armed watch against its node (ZooKeeper's set-watches).
//   - The connection states are Curator's: StateSuspended while the
//     listening connection is down (calls fail with ErrConnectionLoss),
//     StateLost once the session timeout has passed since the last
//     heartbeat or the database says it expired.
//
// Goroutines: one per Store (the session goroutine) plus the pool's; Close
// stops them.
package pgstore

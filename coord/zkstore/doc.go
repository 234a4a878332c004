// Package zkstore implements store.Store on a ZooKeeper ensemble with
// github.com/go-zookeeper/zk. It is shardflow's production coordination
// store; it passes the conformance suite in coord/storetest on a real server.
//
//	st, err := zkstore.Open(ctx, zkstore.Config{
//		Servers: []string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		Root:    "/shardflow",         // optional namespace
//		Auth:    "shardflow:s3cret",   // optional digest ACL on every created node
//	})
//	if err != nil { ... }            // names every address and why it failed
//	defer st.Close()                 // ends the session: ephemerals vanish at once
//
// # Session states
//
// The client's states map to store states as follows:
//
//	zk StateHasSession                      -> StateConnected (Session().ID is the session id)
//	zk StateDisconnected while connected    -> StateSuspended; a timer of the
//	                                           negotiated session timeout starts
//	reconnected within the timeout          -> StateConnected, SAME session id:
//	                                           ephemerals and watches are kept
//	timer fires (still disconnected)        -> StateLost; the store retires the
//	                                           client and dials a new one, which
//	                                           gets a NEW session
//	zk StateExpired (learnt on reconnect)   -> StateLost; the client itself opens
//	                                           a NEW session
//	new session established                 -> StateConnected with the new id
//	Close                                   -> StateClosed (terminal)
//
// Once StateLost is reported the old session is never resumed, even if the
// server had not expired it yet: the retired client is cut off before it can
// reconnect, so "lost" means what the store package promises (ephemerals
// presumed gone, owned work must stop). Watches of the lost session fire
// EventNotWatching with store.ErrSessionExpired at the moment it is given up;
// calls that were in flight on it fail with store.ErrSessionExpired.
// Session() returns a snapshot and a channel closed at the next change, so
// no transition is missed.
//
// # Traps of the ZooKeeper client handled here
//
//   - Connect returns before any session exists: Open waits for
//     StateHasSession (and for the credentials), bounded by
//     Config.ConnectTimeout and ctx, and on failure closes the client and
//     reports every address with its last error.
//   - The client's event channel holds 6 events and drops the rest: the
//     store uses zk.WithEventCallback only. The callback never blocks and
//     never calls the client: session events go to a queue drained by the
//     store's session goroutine; node events go straight to the watch
//     registry, whose sends never block (capacity-1 channels, one send each).
//   - No persistent watches, and a goroutine per watch would not scale: one
//     registry dispatches the callback's node events to store watch
//     channels. A watch is registered before its request is sent so that an
//     event right after the response cannot be missed (see watchRegistry for
//     the rare spurious wake-up this allows).
//   - The client retries a partition forever and learns of expiry only on
//     reconnect: the store keeps its own timer from StateDisconnected and
//     declares StateLost after the negotiated session timeout. The
//     negotiated timeout is not exported by the client: it is read off the
//     wire from the handshake reply.
//   - A client whose ensemble lost its data (lastZxid ahead of the server)
//     loops forever: the redial after StateLost starts from a fresh client.
//   - No context and no per-call timeout: calls with a cancellable context
//     run on a goroutine and return ctx.Err() when ctx ends first; that
//     goroutine ends when the call returns, at the latest when Close closes
//     the client, and Close waits for it. A watch armed by an abandoned call
//     is disarmed.
//   - Close must not leak the client's goroutines nor hang on a frozen
//     server (the handshake read waits up to ~6.7 session timeouts): the
//     store dials through its own dialer, cuts every connection on Close and
//     waits until the client's event channel is closed. With a live session
//     Close first sends closeSession, so the ephemerals vanish at once.
//   - The client waits for a server's handshake answer up to 6.7 session
//     timeouts: a connection accepted but never answered (a port proxy whose
//     container is not up yet, a starting or frozen server) would outlast the
//     session, and a session that could have been resumed would be lost. The
//     store's dialer bounds that wait to a third of the session timeout (at
//     least Config.DialTimeout), after which the client tries again.
//   - Digest credentials: the client re-sends credentials on every reconnect
//     and new session, but only once a first AddAuth succeeded. The store
//     retries AddAuth on every new client and holds calls until it
//     succeeded, so no call ever runs unauthenticated. Every created node
//     carries digest(user:password) with all permissions, plus world read
//     with Config.WorldReadable. Note that deleting a node is governed by its
//     parent's ACL, as always in ZooKeeper.
//   - The default host provider resolves names once, at Connect (a redial
//     while DNS is down would fail) and pauses 1s with ErrNoServer on the
//     first reconnect to a one-server ensemble: the store uses a static
//     provider (the dialer resolves at every attempt) whose first round after
//     a lost connection is free.
//   - Multi: ZooKeeper answers a failed transaction with OK for the
//     operations before the culprit and "runtime inconsistency" (rolled
//     back) after it; store.MultiError names the culprit.
//   - Errors: every client error is mapped to the store sentinel (zk.ErrNoNode
//     on create is store.ErrNoParent; connection errors are
//     store.ErrConnectionLoss, or store.ErrClosed after Close) and names the
//     operation and path.
//
// Root (chroot) is implemented by the store, since the client has none: paths
// are prefixed on the way in and stripped from created paths and results on
// the way out; watch events carry store paths.
//
// # Running -race in a program that imports this package
//
// go-zookeeper has a data race of its own (upstream go-zookeeper/zk#35): on
// a reconnect with watches set, the client's loop goroutine reads
// Conn.lastZxid in sendSetWatches while the new connection's recvLoop writes
// it from a reply. The race detector then reports "DATA RACE" with
// (*Conn).recvLoop writing and (*Conn).sendSetWatches reading, both in
// go-zookeeper's conn.go, and fails the test that was running, whichever it
// was: it can be reported whenever a session survives a disconnect while watches are
// set, which this store does by design. No code of this package takes part,
// and it cannot be avoided from outside the client (the store must keep
// watches across a reconnect). Its effect in practice is small (one aligned
// 64-bit word; an older value can at most cause a spurious watch event).
//
// shardflow's own `make test` builds against a copy of the client whose
// accesses are atomic, generated at build time; see docs/development.md.
// Programs importing shardflow can do the same from their module root (the
// tool runs at the shardflow version of their go.mod):
//
//	go run github.com/shardflow/shardflow/internal/zkoverlay -out .build/zk-overlay
//	GOWORK=$PWD/.build/zk-overlay/go.work go test -race ./...
//
// The tool patches the go-zookeeper version of the current module's build
// list and refuses, naming what it expected, a source it does not recognise.
package zkstore

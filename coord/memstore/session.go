package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// DefaultSessionTimeout is the session timeout when WithSessionTimeout is not given.
const DefaultSessionTimeout = 10 * time.Second

// SessionOption configures a session opened by Server.Connect.
type SessionOption func(*Session)

// WithSessionTimeout sets how long a disconnected session survives before the
// server expires it (see Session.Disconnect). Default DefaultSessionTimeout;
// values <= 0 keep the default.
func WithSessionTimeout(d time.Duration) SessionOption {
	return func(s *Session) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// WithGroupCommit sends the session's Multis through a group committer
// (coord/store/groupcommit), as zkstore does by default: Multis made at the
// same time are applied together in combined transactions, requests of one
// job never in one. With it, Multi may wait for the combined transaction
// before it; the tests and the simulation (coord/coordtest) use it so that
// they cover the batched path.
func WithGroupCommit() SessionOption {
	return func(s *Session) { s.groupCommit = true }
}

// Session is one session on a Server and implements store.Store. Like a
// ZooKeeper client handle it outlives its session: after an expiry it gets a
// new session id and keeps working (StateConnected), while the old session's
// ephemeral nodes and watches are gone.
//
// All methods are safe for concurrent use and never block: operations run
// against the in-memory tree at once. Each method first checks ctx (a done
// ctx returns ctx.Err()), then the session (ErrClosed after Close,
// ErrConnectionLoss while disconnected).
type Session struct {
	srv     *Server
	timeout time.Duration
	// groupCommit: WithGroupCommit; commits is its committer.
	groupCommit bool
	commits     *groupcommit.Committer

	// Fields below are guarded by srv.mu.
	id           int64
	live         bool // the session id is known to the server (not expired)
	disconnected bool
	closed       bool
	changed      chan struct{}
	watches      map[*watch]struct{}
	queued       []queuedEvent

	timer    *time.Timer
	timerGen uint64
	// timers counts expiry timer callbacks that may still run; Close waits
	// for it so no goroutine outlives the session.
	timers sync.WaitGroup
}

var _ store.Store = (*Session)(nil)

// Connect opens a new session, StateConnected at once.
func (s *Server) Connect(opts ...SessionOption) *Session {
	sess := &Session{
		srv:     s,
		timeout: DefaultSessionTimeout,
		changed: make(chan struct{}),
		watches: make(map[*watch]struct{}),
	}
	for _, o := range opts {
		o(sess)
	}
	if sess.groupCommit {
		limit := s.maxRequest
		if limit <= 0 {
			limit = store.DefaultRequestLimit
		}
		sess.commits = groupcommit.NewCommitter(sess.multi, limit)
	}
	s.mu.Lock()
	s.openLocked(sess)
	s.mu.Unlock()
	return sess
}

// openLocked gives the handle a fresh session id.
func (s *Server) openLocked(sess *Session) {
	sess.id = s.newSessionIDLocked()
	sess.live = true
	s.sessions[sess.id] = sess
}

// expireLocked ends the handle's current session on the server: its
// ephemeral nodes are deleted (firing other sessions' watches) and its own
// watches end with EventNotWatching carrying cause.
func (s *Server) expireLocked(sess *Session, cause error) {
	if !sess.live {
		return
	}
	sess.live = false
	delete(s.sessions, sess.id)
	s.dropEphemeralsLocked(sess.id)
	s.dropWatchesLocked(sess, cause)
}

// notifyLocked wakes Session() watchers: the state or id changed.
func (sess *Session) notifyLocked() {
	close(sess.changed)
	sess.changed = make(chan struct{})
}

func (sess *Session) stateLocked() store.State {
	switch {
	case sess.closed:
		return store.StateClosed
	case !sess.live:
		return store.StateLost
	case sess.disconnected:
		return store.StateSuspended
	}
	return store.StateConnected
}

// stopTimerLocked cancels a pending expiry timer; a callback already running
// sees the bumped generation and does nothing.
func (sess *Session) stopTimerLocked() {
	sess.timerGen++
	if sess.timer != nil && sess.timer.Stop() {
		sess.timers.Done()
	}
	sess.timer = nil
}

// ID returns the current session id (it changes after an expiry).
func (sess *Session) ID() int64 {
	sess.srv.mu.Lock()
	defer sess.srv.mu.Unlock()
	return sess.id
}

// Server returns the server this session is connected to.
func (sess *Session) Server() *Server { return sess.srv }

// Session returns the current session and a channel closed at the next change
// of id or state. Every change closes the channel, so a change is never
// missed, but two changes in a row (Expire: StateLost then StateConnected with
// a new id) may be observed as one: compare ids, not only states.
func (sess *Session) Session() (store.Session, <-chan struct{}) {
	sess.srv.mu.Lock()
	defer sess.srv.mu.Unlock()
	return store.Session{ID: sess.id, State: sess.stateLocked(), Timeout: sess.timeout}, sess.changed
}

// Close ends the session at once: its ephemeral nodes are deleted (other
// sessions' watches fire), its pending watches get EventNotWatching with
// ErrClosed, the state becomes StateClosed and later calls fail with
// ErrClosed. It stops the expiry timer and waits for it. Safe to call twice;
// always returns nil.
func (sess *Session) Close() error {
	s := sess.srv
	s.mu.Lock()
	if sess.closed {
		s.mu.Unlock()
		return nil
	}
	sess.stopTimerLocked()
	if sess.live {
		sess.live = false
		delete(s.sessions, sess.id)
		s.dropEphemeralsLocked(sess.id)
	}
	s.dropWatchesLocked(sess, fmt.Errorf("memstore: session 0x%x: %w", sess.id, store.ErrClosed))
	sess.closed = true
	sess.notifyLocked()
	s.mu.Unlock()
	sess.timers.Wait()
	if sess.commits != nil {
		sess.commits.Wait() // its batch in flight ended with ErrClosed
	}
	return nil
}

// Disconnect simulates a cut connection: calls fail with ErrConnectionLoss,
// the state becomes StateSuspended, ephemeral nodes stay and watch events are
// held back. If Reconnect does not come within the session timeout, the
// server expires the session: its ephemerals are deleted, its watches get
// EventNotWatching with ErrSessionExpired, and the state becomes StateLost
// until Reconnect. No-op when already disconnected or closed.
func (sess *Session) Disconnect() {
	s := sess.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.closed || sess.disconnected {
		return
	}
	sess.disconnected = true
	if sess.live {
		sess.stopTimerLocked()
		gen := sess.timerGen
		sess.timers.Add(1)
		sess.timer = time.AfterFunc(sess.timeout, func() { sess.onTimeout(gen) })
	}
	sess.notifyLocked()
}

func (sess *Session) onTimeout(gen uint64) {
	defer sess.timers.Done()
	s := sess.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != sess.timerGen || sess.closed || !sess.disconnected || !sess.live {
		return
	}
	sess.timer = nil
	s.expireLocked(sess, fmt.Errorf("memstore: session 0x%x expired after %v disconnected: %w", sess.id, sess.timeout, store.ErrSessionExpired))
	sess.notifyLocked()
}

// Reconnect restores a connection cut by Disconnect. If the session did not
// expire meanwhile, it resumes (StateConnected, same id) and the watch events
// held back are delivered. If it expired, a new session is opened
// (StateConnected, new id). No-op when connected or closed.
func (sess *Session) Reconnect() {
	s := sess.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.closed || !sess.disconnected {
		return
	}
	sess.stopTimerLocked()
	sess.disconnected = false
	if sess.live {
		for _, q := range sess.queued {
			q.w.fire(q.ev)
		}
		sess.queued = nil
	} else {
		s.openLocked(sess)
	}
	sess.notifyLocked()
}

// Expire makes the server expire the session now: its ephemeral nodes are
// deleted, its watches get EventNotWatching with ErrSessionExpired, and the
// state goes StateLost. A connected handle then opens a new session at once
// (StateConnected, new id), as the ZooKeeper client does; a disconnected one
// stays StateLost until Reconnect. No-op when closed or already expired.
func (sess *Session) Expire() {
	s := sess.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.closed || !sess.live {
		return
	}
	sess.stopTimerLocked()
	s.expireLocked(sess, fmt.Errorf("memstore: session 0x%x expired by the server: %w", sess.id, store.ErrSessionExpired))
	sess.notifyLocked()
	if !sess.disconnected {
		s.openLocked(sess)
		sess.notifyLocked()
	}
}

// enter checks ctx and the session and takes the server lock; on success the
// caller must unlock. It counts the request.
func (sess *Session) enter(ctx context.Context, op, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sess.srv
	s.mu.Lock()
	if sess.closed || sess.disconnected {
		closed, id := sess.closed, sess.id
		s.mu.Unlock()
		what := op
		if p != "" {
			what = fmt.Sprintf("%s %q", op, p)
		}
		if closed {
			return fmt.Errorf("memstore: %s: %w", what, store.ErrClosed)
		}
		return fmt.Errorf("memstore: %s: session 0x%x disconnected: %w", what, id, store.ErrConnectionLoss)
	}
	s.stats.Requests++
	return nil
}

// Create makes a node; see store.Store.
func (sess *Session) Create(ctx context.Context, p string, data []byte, mode store.Mode) (string, error) {
	if err := sess.enter(ctx, "create", p); err != nil {
		return "", err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.WriteOps++
	t := s.begin()
	created, err := t.create(sess.id, p, data, mode)
	if err != nil {
		t.rollback()
		return "", err
	}
	t.commit()
	return created, nil
}

// Get returns a node's data (a copy) and stat; see store.Store.
func (sess *Session) Get(ctx context.Context, p string) ([]byte, store.Stat, error) {
	return sess.get(ctx, p, nil)
}

// GetW is Get plus a one-shot watch for data change or deletion.
func (sess *Session) GetW(ctx context.Context, p string) ([]byte, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	data, st, err := sess.get(ctx, p, fire)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return data, st, ch, nil
}

// GetWFunc is GetW with the event delivered to fn; see store.FuncWatcher.
func (sess *Session) GetWFunc(ctx context.Context, p string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	return sess.get(ctx, p, fn)
}

// get reads p and, with a non-nil fire, arms a data watch.
func (sess *Session) get(ctx context.Context, p string, fire store.WatchFunc) ([]byte, store.Stat, error) {
	if err := sess.enter(ctx, "get", p); err != nil {
		return nil, store.Stat{}, err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.Reads++
	if err := validate("get", p, false); err != nil {
		return nil, store.Stat{}, err
	}
	n := s.nodes[p]
	if n == nil {
		return nil, store.Stat{}, fmt.Errorf("memstore: get %q: %w", p, store.ErrNoNode)
	}
	if fire != nil {
		s.addWatchLocked(sess, p, dataWatch, fire)
	}
	return cloneBytes(n.data), n.stat, nil
}

// Exists reports whether a node exists; see store.Store.
func (sess *Session) Exists(ctx context.Context, p string) (bool, store.Stat, error) {
	return sess.exists(ctx, p, nil)
}

// ExistsW is Exists plus a one-shot watch; on a missing node it fires on creation.
func (sess *Session) ExistsW(ctx context.Context, p string) (bool, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	ok, st, err := sess.exists(ctx, p, fire)
	if err != nil {
		return false, store.Stat{}, nil, err
	}
	return ok, st, ch, nil
}

// ExistsWFunc is ExistsW with the event delivered to fn; see
// store.FuncWatcher.
func (sess *Session) ExistsWFunc(ctx context.Context, p string, fn store.WatchFunc) (bool, store.Stat, error) {
	return sess.exists(ctx, p, fn)
}

// exists reads p's existence and, with a non-nil fire, arms a data watch.
func (sess *Session) exists(ctx context.Context, p string, fire store.WatchFunc) (bool, store.Stat, error) {
	if err := sess.enter(ctx, "exists", p); err != nil {
		return false, store.Stat{}, err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.Reads++
	if err := validate("exists", p, false); err != nil {
		return false, store.Stat{}, err
	}
	if fire != nil {
		s.addWatchLocked(sess, p, dataWatch, fire)
	}
	n := s.nodes[p]
	if n == nil {
		return false, store.Stat{}, nil
	}
	return true, n.stat, nil
}

// Children lists a node's children, sorted; see store.Store.
func (sess *Session) Children(ctx context.Context, p string) ([]string, store.Stat, error) {
	return sess.children(ctx, p, nil)
}

// ChildrenW is Children plus a one-shot watch for child changes or deletion.
func (sess *Session) ChildrenW(ctx context.Context, p string) ([]string, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	names, st, err := sess.children(ctx, p, fire)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return names, st, ch, nil
}

// ChildrenWFunc is ChildrenW with the event delivered to fn; see
// store.FuncWatcher.
func (sess *Session) ChildrenWFunc(ctx context.Context, p string, fn store.WatchFunc) ([]string, store.Stat, error) {
	return sess.children(ctx, p, fn)
}

// children lists p's children and, with a non-nil fire, arms a child watch.
func (sess *Session) children(ctx context.Context, p string, fire store.WatchFunc) ([]string, store.Stat, error) {
	if err := sess.enter(ctx, "children", p); err != nil {
		return nil, store.Stat{}, err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.Reads++
	if err := validate("children", p, false); err != nil {
		return nil, store.Stat{}, err
	}
	n := s.nodes[p]
	if n == nil {
		return nil, store.Stat{}, fmt.Errorf("memstore: children %q: %w", p, store.ErrNoNode)
	}
	names := make([]string, 0, len(n.children))
	for c := range n.children {
		names = append(names, c)
	}
	sort.Strings(names)
	if fire != nil {
		s.addWatchLocked(sess, p, childWatch, fire)
	}
	return names, n.stat, nil
}

// Set replaces a node's data if its version matches; see store.Store.
func (sess *Session) Set(ctx context.Context, p string, data []byte, version int32) (store.Stat, error) {
	if err := sess.enter(ctx, "set", p); err != nil {
		return store.Stat{}, err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.WriteOps++
	t := s.begin()
	st, err := t.set(p, data, version)
	if err != nil {
		t.rollback()
		return store.Stat{}, err
	}
	t.commit()
	return st, nil
}

// Delete removes a childless node if its version matches; see store.Store.
func (sess *Session) Delete(ctx context.Context, p string, version int32) error {
	if err := sess.enter(ctx, "delete", p); err != nil {
		return err
	}
	s := sess.srv
	defer s.mu.Unlock()
	s.stats.WriteOps++
	t := s.begin()
	if err := t.delete(p, version); err != nil {
		t.rollback()
		return err
	}
	t.commit()
	return nil
}

// MaxRequestBytes implements store.RequestLimiter: the server's
// WithMaxRequestBytes limit, 0 when it has none.
func (sess *Session) MaxRequestBytes() int { return sess.srv.maxRequest }

// Multi applies all operations in one transaction (one zxid), or none; the
// error is then a *store.MultiError naming the first failing operation.
// Watches fire only when it commits. An empty Multi succeeds.
func (sess *Session) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if sess.commits != nil {
		return sess.commits.Multi(ctx, ops...)
	}
	return sess.multi(ctx, ops...)
}

// multi applies ops in one transaction.
func (sess *Session) multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if err := sess.enter(ctx, "multi", ""); err != nil {
		return nil, err
	}
	s := sess.srv
	defer s.mu.Unlock()
	if s.maxRequest > 0 {
		if n := store.MultiSize(ops); n > s.maxRequest {
			return nil, fmt.Errorf("memstore: multi of %d operations, about %d bytes, over the %d-byte limit: %w", len(ops), n, s.maxRequest, store.ErrTooLarge)
		}
	}
	s.stats.Multis++
	for _, op := range ops {
		switch op.(type) {
		case *store.CreateOp, *store.SetOp, *store.DeleteOp:
			s.stats.WriteOps++
		}
	}
	t := s.begin()
	results := make([]store.OpResult, len(ops))
	for i, op := range ops {
		var err error
		if isNilOp(op) {
			t.rollback()
			return nil, &store.MultiError{Index: i, Op: op, Err: fmt.Errorf("memstore: multi op %d is nil; pass a non-nil *store.CreateOp, *SetOp, *DeleteOp or *CheckOp", i)}
		}
		switch o := op.(type) {
		case *store.CreateOp:
			results[i].Path, err = t.create(sess.id, o.Path, o.Data, o.Mode)
		case *store.SetOp:
			results[i].Path = o.Path
			results[i].Stat, err = t.set(o.Path, o.Data, o.Version)
		case *store.DeleteOp:
			results[i].Path = o.Path
			err = t.delete(o.Path, o.Version)
		case *store.CheckOp:
			results[i].Path = o.Path
			err = t.check(o.Path, o.Version)
		default:
			err = fmt.Errorf("memstore: multi op %d: unsupported operation type %T; use *store.CreateOp, *SetOp, *DeleteOp or *CheckOp", i, op)
		}
		if err != nil {
			t.rollback()
			return nil, &store.MultiError{Index: i, Op: op, Err: err}
		}
	}
	t.commit()
	return results, nil
}

func isNilOp(op store.Op) bool {
	switch o := op.(type) {
	case nil:
		return true
	case *store.CreateOp:
		return o == nil
	case *store.SetOp:
		return o == nil
	case *store.DeleteOp:
		return o == nil
	case *store.CheckOp:
		return o == nil
	}
	return false
}

// Sync returns once every write committed before it is visible to this
// session; memstore is linearizable, so it only checks ctx, the session and
// the path (which need not exist, as in ZooKeeper).
func (sess *Session) Sync(ctx context.Context, p string) error {
	if err := sess.enter(ctx, "sync", p); err != nil {
		return err
	}
	defer sess.srv.mu.Unlock()
	return validate("sync", p, false)
}

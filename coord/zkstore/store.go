package zkstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
	"github.com/shardflow/shardflow/internal/startstop"
)

// Store is a store.Store on a ZooKeeper ensemble: one ZooKeeper session at a
// time, replaced by a new one when it is lost. All methods are safe for
// concurrent use.
//
// Goroutines: the store owns one session goroutine (state machine and the
// Lost timer; a startstop service, started by Open and stopped by Close),
// one credential goroutine per client generation while Config.Auth is being
// (re)installed, one goroutine per call made with a cancellable context (it
// ends when the ZooKeeper call returns), and the go-zookeeper client's own
// goroutines. Close stops and waits for all of them. The credential, call
// and client-retiring goroutines are not services: each ends on its own (its
// client retired, its call returned), so WaitGroups count them for Close.
type Store struct {
	cfg     Config
	log     *slog.Logger
	watches *watchRegistry

	mu     sync.Mutex
	closed bool
	cur    *client       // current client generation; replaced only by loop
	sess   store.Session // published session
	sessCh chan struct{} // closed at the next change of sess

	calls sync.WaitGroup // in-flight call goroutines
	bg    sync.WaitGroup // credential goroutines and retiring clients

	qmu   sync.Mutex
	queue []stateEvent
	wake  chan struct{} // capacity 1: queue is non-empty

	session startstop.BaseStartStop // the session goroutine (loop)

	// commits coalesces concurrent Multis (nil with Config.NoGroupCommit).
	commits *groupcommit.Committer
}

var _ store.Store = (*Store)(nil)

// client is one go-zookeeper connection: one "generation". A generation is
// retired when its session is declared lost by the timer (the store then
// dials a fresh client, which gets a new session) or when the store closes.
type client struct {
	gen    uint64
	conn   *zk.Conn
	events <-chan zk.Event // closed when the client's main goroutine ends
	d      *dialer
	ready  chan struct{} // closed once Config.Auth is installed (at once without Auth)
}

// stateEvent is a session event of one generation, queued by the event
// callback for the session goroutine.
type stateEvent struct {
	gen       uint64
	state     zk.State
	sessionID int64
	timeout   time.Duration
}

// Open connects to the ensemble and returns a Store once a session is
// established, the credentials are installed and Root exists. It blocks
// until then, or until ctx ends or Config.ConnectTimeout passes; then it
// closes the client and returns an error (wrapping ErrUnreachable on
// timeout) that names every address with its last failure.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "zkstore"),
		watches: newWatchRegistry(),
		sessCh:  make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	s.sess = store.Session{State: store.StateConnecting, Timeout: cfg.SessionTimeout}
	if !cfg.NoGroupCommit {
		s.commits = groupcommit.NewCommitter(s.multi, store.DefaultRequestLimit)
	}

	c, err := s.newClient(1)
	if err != nil {
		return nil, fmt.Errorf("zkstore: open %v: %w", cfg.Servers, err)
	}
	s.cur = c
	s.session.Go(context.Background(), func(ctx context.Context) { s.loop(ctx, c.gen) })

	octx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := s.awaitReady(octx, c); err != nil {
		desc := c.d.describe(cfg.Servers)
		_ = s.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zkstore: open %s: %w", desc, ctx.Err())
		}
		return nil, fmt.Errorf("%w: no session within ConnectTimeout %v from %s", ErrUnreachable, cfg.ConnectTimeout, desc)
	}
	if cfg.Root != "" {
		if err := s.createRoot(octx); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("zkstore: open: creating Root %q: %w", cfg.Root, err)
		}
	}
	sess, _ := s.Session()
	s.log.Info("zookeeper session established", "servers", cfg.Servers, "session", fmt.Sprintf("0x%x", sess.ID), "timeout", sess.Timeout)
	return s, nil
}

// awaitReady waits until the store is StateConnected on client c and c's
// credentials are installed.
func (s *Store) awaitReady(ctx context.Context, c *client) error {
	connected := func(sess store.Session) bool { return sess.State == store.StateConnected }
	if _, err := store.AwaitSession(ctx, s, connected); err != nil {
		return err
	}
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// createRoot creates Root and its missing ancestors with the store's ACL.
func (s *Store) createRoot(ctx context.Context) error {
	parts := strings.Split(strings.TrimPrefix(s.cfg.Root, "/"), "/")
	p := ""
	for _, part := range parts {
		p += "/" + part
		full := p
		_, err := s.call(ctx, func(c *client) error {
			_, err := c.conn.Create(full, nil, zk.FlagPersistent, s.cfg.aclFor("/"))
			return err
		}, nil)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return s.mapErr(nil, "create", full, err)
		}
	}
	return nil
}

// newClient dials a new client generation. zk.Connect returns at once; the
// session is reported through the event callback.
func (s *Store) newClient(gen uint64) (*client, error) {
	d := newDialer(s.cfg.DialTimeout, handshakeTimeout(s.cfg))
	c := &client{gen: gen, d: d, ready: make(chan struct{})}
	cb := func(ev zk.Event) { s.onEvent(c, ev) }
	conn, events, err := zk.Connect(s.cfg.Servers, s.cfg.SessionTimeout,
		zk.WithEventCallback(cb),
		zk.WithDialer(d.dial),
		zk.WithHostProvider(&hostProvider{}),
		zk.WithLogger(zkLogger{s.log}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		d.retire()
		return nil, err
	}
	c.conn, c.events = conn, events
	if s.cfg.Auth == "" {
		close(c.ready)
	} else {
		s.bg.Add(1)
		go s.installAuth(c)
	}
	return c, nil
}

// installAuth adds the digest credentials to c, retrying until it succeeds
// or c retires. The client re-sends stored credentials on every reconnect
// and new session by itself, but it stores them only after a successful
// AddAuth: a failed attempt (e.g. ErrNoServer while the ensemble is down)
// must be retried, and no store call may use c before it succeeded (calls
// wait for c.ready), or it would run unauthenticated.
func (s *Store) installAuth(c *client) {
	defer s.bg.Done()
	const backoff = 200 * time.Millisecond
	for {
		err := c.conn.AddAuth("digest", []byte(s.cfg.Auth))
		if err == nil {
			close(c.ready)
			return
		}
		if c.d.ctx.Err() != nil {
			return
		}
		s.log.Debug("installing digest credentials failed; retrying", "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.d.ctx.Done():
			t.Stop()
			return
		}
	}
}

// shutdown stops client c and waits until its goroutines have ended. With
// graceful it first ends the session on the server (ephemerals vanish at
// once); otherwise it cuts the network first so that nothing is sent.
func (c *client) shutdown(graceful bool) {
	if graceful {
		c.conn.Close() // sends closeSession, waits at most ~1s for the reply
		c.d.retire()
	} else {
		c.d.retire()
		c.conn.Close()
	}
	// The client closes its event channel when its main goroutine ends;
	// draining it is how to wait for that.
	for range c.events {
	}
}

// onEvent is the go-zookeeper event callback of client c. It runs on the
// client's goroutines and must not block nor call the client: node events
// go to the watch registry (non-blocking sends), session events to the
// session goroutine's queue.
func (s *Store) onEvent(c *client, ev zk.Event) {
	switch ev.Type {
	case zk.EventSession:
		if ev.State == zk.StateExpired {
			// Before the client reconnects with a new session: no watch
			// armed on the new session can be wrongly invalidated.
			s.watches.invalidate(c.gen, store.ErrSessionExpired)
		}
		se := stateEvent{gen: c.gen, state: ev.State}
		if ev.State == zk.StateHasSession {
			se.sessionID = c.d.sessionID.Load()
			se.timeout = time.Duration(c.d.timeoutMs.Load()) * time.Millisecond
			if se.timeout <= 0 { // never seen: the reply is read before this event
				se.timeout = s.cfg.SessionTimeout
			}
		}
		s.qmu.Lock()
		s.queue = append(s.queue, se)
		s.qmu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	case zk.EventNodeCreated:
		s.watches.dispatch(c.gen, ev.Path, ev.Type, store.EventNodeCreated)
	case zk.EventNodeDeleted:
		s.watches.dispatch(c.gen, ev.Path, ev.Type, store.EventNodeDeleted)
	case zk.EventNodeDataChanged:
		s.watches.dispatch(c.gen, ev.Path, ev.Type, store.EventNodeDataChanged)
	case zk.EventNodeChildrenChanged:
		s.watches.dispatch(c.gen, ev.Path, ev.Type, store.EventNodeChildrenChanged)
	}
	// zk.EventNotWatching: the store invalidates its own watches on
	// StateExpired, on retiring a generation and on Close.
}

// loop is the session goroutine: it maps client states to store states,
// runs the Suspended -> Lost timer and replaces a lost session's client,
// until ctx ends (Close).
func (s *Store) loop(ctx context.Context, gen uint64) {
	var lostTimer *time.Timer
	var lostC <-chan time.Time
	stopTimer := func() {
		if lostTimer != nil {
			lostTimer.Stop()
			lostTimer, lostC = nil, nil
		}
	}
	defer stopTimer()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			s.qmu.Lock()
			q := s.queue
			s.queue = nil
			s.qmu.Unlock()
			for _, ev := range q {
				if ev.gen != gen {
					continue // a retired client's late event
				}
				cur, _ := s.Session()
				switch ev.state {
				case zk.StateHasSession:
					stopTimer()
					if cur.ID != 0 && cur.ID != ev.sessionID {
						s.log.Info("zookeeper session replaced", "old", fmt.Sprintf("0x%x", cur.ID), "new", fmt.Sprintf("0x%x", ev.sessionID))
					} else if cur.State == store.StateSuspended || cur.State == store.StateLost {
						s.log.Info("zookeeper connection restored", "session", fmt.Sprintf("0x%x", ev.sessionID))
					}
					s.publish(store.Session{ID: ev.sessionID, State: store.StateConnected, Timeout: ev.timeout})
				case zk.StateDisconnected:
					if cur.State == store.StateConnected {
						s.log.Warn("zookeeper connection lost; session suspended", "session", fmt.Sprintf("0x%x", cur.ID), "lost_after", cur.Timeout)
						s.publish(store.Session{ID: cur.ID, State: store.StateSuspended, Timeout: cur.Timeout})
						lostTimer = time.NewTimer(cur.Timeout)
						lostC = lostTimer.C
					}
				case zk.StateExpired:
					stopTimer()
					if cur.State != store.StateLost {
						s.log.Warn("zookeeper session expired", "session", fmt.Sprintf("0x%x", cur.ID))
						s.publish(store.Session{ID: cur.ID, State: store.StateLost, Timeout: cur.Timeout})
					}
				}
			}
		case <-lostC:
			lostTimer, lostC = nil, nil
			cur, _ := s.Session()
			if cur.State != store.StateSuspended && cur.State != store.StateLost {
				continue
			}
			if cur.State == store.StateSuspended {
				s.log.Warn("zookeeper disconnected for longer than the session timeout; session lost", "session", fmt.Sprintf("0x%x", cur.ID), "timeout", cur.Timeout)
				s.publish(store.Session{ID: cur.ID, State: store.StateLost, Timeout: cur.Timeout})
			}
			// The server has expired (or will expire) the session. Resuming
			// it would contradict StateLost, and a client whose ensemble
			// lost its data loops forever: start over with a fresh client.
			nc, err := s.newClient(gen + 1)
			if err != nil {
				s.log.Error("redialing zookeeper failed; retrying", "error", err)
				lostTimer = time.NewTimer(cur.Timeout)
				lostC = lostTimer.C
				continue
			}
			s.mu.Lock()
			old := s.cur
			s.cur = nc
			s.mu.Unlock()
			gen = nc.gen
			s.watches.invalidate(old.gen, store.ErrSessionExpired)
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				old.shutdown(false)
			}()
		}
	}
}

// publish installs a new session snapshot and wakes Session() waiters.
func (s *Store) publish(sess store.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == sess || s.sess.State == store.StateClosed {
		return
	}
	s.sess = sess
	close(s.sessCh)
	s.sessCh = make(chan struct{})
}

// Session returns the current session and a channel closed at its next
// change (ID or State). No change is dropped: the snapshot and the channel
// are taken together, so re-reading after the channel closes sees every
// transition's end state. Non-blocking.
func (s *Store) Session() (store.Session, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess, s.sessCh
}

// Close ends the session at once (its ephemeral nodes vanish), fires every
// armed watch with EventNotWatching (ErrClosed), makes later calls fail with
// ErrClosed and moves the session to StateClosed. It waits for every
// goroutine of the store; when the ensemble is unreachable that takes up to
// about one second. Safe to call twice; always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	s.session.Stop() // the loop no longer replaces s.cur

	s.mu.Lock()
	c, st := s.cur, s.sess.State
	s.mu.Unlock()
	c.shutdown(st == store.StateConnected)
	s.calls.Wait()
	if s.commits != nil {
		s.commits.Wait() // its batch in flight ended with ErrClosed
	}
	s.bg.Wait()
	s.watches.closeAll(store.ErrClosed)

	s.mu.Lock()
	s.sess = store.Session{ID: s.sess.ID, State: store.StateClosed, Timeout: s.sess.Timeout}
	close(s.sessCh)
	s.sessCh = make(chan struct{})
	s.mu.Unlock()
	return nil
}

// conn returns the current go-zookeeper client (for tests: export_test.go).
// It changes when a lost session is replaced.
func (s *Store) conn() *zk.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.conn
}

// dropConnections cuts the current TCP connection(s) to ZooKeeper, as a
// network blip would: the store goes StateSuspended and the client
// reconnects, normally resuming the same session. It returns the number of
// connections cut (for tests: export_test.go).
func (s *Store) dropConnections() int {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	return c.d.dropConnections()
}

// zkLogger routes the go-zookeeper client's messages to slog at Debug: the
// store logs the state transitions that matter itself.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l.Enabled(context.Background(), slog.LevelDebug) {
		z.l.Debug(fmt.Sprintf(format, args...), "source", "go-zookeeper")
	}
}

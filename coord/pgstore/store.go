package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// Store is a store.Store on Postgres: one session at a time, replaced by a
// new one when it is lost. All methods are safe for concurrent use.
//
// Goroutines: the store owns one session goroutine, which holds the
// listening connection, sends the heartbeats, reaps expired sessions and
// dispatches watch events; the pool's own. Close stops and waits for them.
type Store struct {
	cfg     Config
	log     *slog.Logger
	q       string // the schema, quoted
	channel string // the NOTIFY channel of the schema
	pool    *pgxpool.Pool
	listen  *pgx.ConnConfig
	reg     *registry
	commits *groupcommit.Queue[writeMeta] // group commit of the writes (batch.go)

	mu     sync.Mutex
	closed bool
	sess   store.Session // published session
	sessCh chan struct{} // closed at the next change of sess
	oldID  int64         // a lost session to end on the server at the next connect
	nudged bool          // a call lost its connection: see nudge
	wake   func()        // interrupts loop's wait for notifications

	lastOK time.Time // when the last heartbeat that found the session alive was sent; loop's

	ctx      context.Context // cancelled by Close: stops loop
	cancel   context.CancelFunc
	loopDone chan struct{}
	calls    sync.WaitGroup
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.FuncWatcher    = (*Store)(nil)
	_ store.RequestLimiter = (*Store)(nil)
)

// Open migrates the schema (when not current), connects, and returns a
// Store once its first session is established. It blocks until then, or
// until ctx ends or Config.ConnectTimeout passes (ErrUnreachable).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: DSN: %v", ErrInvalidConfig, err)
	}
	pcfg.MaxConns = int32(cfg.MaxConns)
	pcfg.MinConns = 0
	pcfg.ConnConfig.ConnectTimeout = cfg.DialTimeout
	// Named in pg_stat_activity, so an operator tells the two apart.
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "shardflow-pgstore"
	}
	lcfg := pcfg.ConnConfig.Copy()
	lcfg.RuntimeParams["application_name"] = pcfg.ConnConfig.RuntimeParams["application_name"] + "-listen"
	s := &Store{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "pgstore", "schema", cfg.Schema),
		q:        pgx.Identifier{cfg.Schema}.Sanitize(),
		channel:  "shardflow_coord_" + cfg.Schema,
		listen:   lcfg,
		reg:      newRegistry(),
		sessCh:   make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.commits = s.newCommits()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.sess = store.Session{State: store.StateConnecting, Timeout: cfg.SessionTimeout}
	octx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	opened := false
	defer func() {
		if !opened {
			s.cancel()
		}
	}()
	where := fmt.Sprintf("%s:%d", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	s.pool, err = pgxpool.NewWithConfig(octx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: DSN: %v", ErrInvalidConfig, err)
	}
	conn, err := s.dial(octx)
	cause := err // the last failure not cut short by ConnectTimeout, for the message
	for err != nil && octx.Err() == nil && !refused(err) {
		// Each attempt is bounded by DialTimeout; Open by ConnectTimeout.
		sleep(octx, retryDelay)
		if conn, err = s.dial(octx); err != nil && octx.Err() == nil {
			cause = err
		}
	}
	if err != nil && octx.Err() != nil && cause != nil {
		err = cause
	}
	if err != nil {
		s.pool.Close()
		return nil, s.openErr(ctx, where, err)
	}
	if err := migrate(octx, conn, cfg.Schema); err != nil {
		_ = conn.Close(context.Background())
		s.pool.Close()
		return nil, err
	}
	if err := s.startSession(octx, conn, true); err != nil {
		_ = conn.Close(context.Background())
		s.pool.Close()
		return nil, s.openErr(ctx, where, err)
	}
	opened = true
	go s.loop(conn)
	sess, _ := s.Session()
	s.log.Info("postgres session established", "server", where, "session", fmt.Sprintf("0x%x", sess.ID), "timeout", sess.Timeout)
	return s, nil
}

// refused reports an error the server answered (a wrong password, a
// missing database or grant): retrying cannot help, unlike an unreachable
// server.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, ErrPermission) || errors.As(err, &pe)
}

func (s *Store) openErr(ctx context.Context, where string, err error) error {
	if errors.Is(err, ErrPermission) {
		return err
	}
	if refused(err) {
		return fmt.Errorf("pgstore: open %s: %w", where, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("pgstore: open %s: %w", where, ctx.Err())
	}
	return fmt.Errorf("%w: no session within ConnectTimeout %v from %s: %v", ErrUnreachable, s.cfg.ConnectTimeout, where, err)
}

// dial opens the listening connection and LISTENs on the schema's channel.
func (s *Store) dial(ctx context.Context) (*pgx.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(dctx, s.listen)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(dctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, mapSetupErr(s.cfg.Schema, "listen", err)
	}
	return conn, nil
}

// MaxRequestBytes implements store.RequestLimiter.
func (s *Store) MaxRequestBytes() int { return s.cfg.MaxRequestBytes }

// Session implements store.Store.
func (s *Store) Session() (store.Session, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess, s.sessCh
}

// hookPublish, when set by a test, sees every session state s publishes
// (a reader of Session may miss one that lasts a moment, such as
// StateLost before the new session).
var hookPublish func(*Store, store.Session)

// publish sets the session and wakes Session's waiters.
func (s *Store) publish(id int64, st store.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && st != store.StateClosed {
		return
	}
	next := store.Session{ID: id, State: st, Timeout: s.cfg.SessionTimeout}
	if next == s.sess {
		return
	}
	s.sess = next
	if hookPublish != nil {
		hookPublish(s, next)
	}
	close(s.sessCh)
	s.sessCh = make(chan struct{})
}

// Close implements store.Store: it ends the session on the server (its
// ephemeral nodes go at once), fires pending watches with EventNotWatching
// and ErrClosed, and stops the session goroutine.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	id := s.sess.ID
	if s.sess.State == store.StateLost {
		id = 0
	}
	s.mu.Unlock()
	s.cancel()
	<-s.loopDone
	s.calls.Wait()
	s.commits.Wait()
	if id != 0 || s.oldID != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
		for _, sid := range []int64{id, s.oldID} {
			if sid != 0 {
				if err := s.endSessions(ctx, []int64{sid}); err != nil {
					s.log.Warn("closing: the session could not be ended on the server; it expires after its timeout", "session", fmt.Sprintf("0x%x", sid), "err", err)
				}
			}
		}
		cancel()
	}
	s.pool.Close()
	s.reg.stop(store.ErrClosed)
	s.publish(0, store.StateClosed)
	return nil
}

// begin registers a call: it fails with ErrClosed after Close, with
// ctx.Err() on a done ctx and with ErrConnectionLoss unless the session is
// connected. It returns the session id, the call's ctx and its end, which
// the caller must call. The call's ctx is tied to the store's life: Close
// ends the calls in flight with ErrClosed rather than waiting for them (a
// call waiting for a connection to a database behind a partition would
// otherwise hold Close, and the caller, for up to DialTimeout: simulation
// seeds 3500119, 3500164, 3500290, a crashed server's CheckOwnership and
// Complete ran out of their 1 s instead of reporting the session gone).
func (s *Store) begin(ctx context.Context, what string) (int64, context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, nil, store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, nil, err
	}
	if s.sess.State != store.StateConnected {
		return 0, nil, nil, fmt.Errorf("pgstore: %s: session %v: %w", what, s.sess.State, store.ErrConnectionLoss)
	}
	s.calls.Add(1)
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(store.ErrClosed) })
	return s.sess.ID, bctx, func() {
		stop()
		cancel(nil)
		s.calls.Done()
	}, nil
}

// ctxErr is the error of a call whose ctx ended: ErrClosed when Close
// ended it (begin), the ctx's own error otherwise.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(context.Cause(ctx), store.ErrClosed) {
		return fmt.Errorf("pgstore: %s: %w", what, store.ErrClosed)
	}
	return ctx.Err()
}

// mapErr maps a database error of call what to the store's errors.
func (s *Store) mapErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctxErr(ctx, what)
	}
	if errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrSessionExpired) || errors.Is(err, store.ErrTooLarge) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "42501":
			return fmt.Errorf("%w: %s: %s; %s", ErrPermission, what, pe.Message, grantsHint(s.cfg.Schema))
		case len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:2] == "57" || pe.Code[:2] == "53"):
			s.nudge()
			return fmt.Errorf("pgstore: %s: %s: %w", what, pe.Message, store.ErrConnectionLoss)
		}
		return fmt.Errorf("pgstore: %s: %w", what, err)
	}
	s.nudge()
	return fmt.Errorf("pgstore: %s: %v: %w", what, err, store.ErrConnectionLoss)
}

// nudge tells the session goroutine that a call lost its connection: it
// drops the listening connection too (StateSuspended) and reconnects, so
// that an ErrConnectionLoss is always followed by a state change, as on
// ZooKeeper (callers wait for one before they retry).
func (s *Store) nudge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nudged = true
	if s.wake != nil {
		s.wake()
	}
}

// takeNudge reports and clears a nudge; setWake installs the function that
// interrupts the session goroutine's wait (nil: it is not waiting).
func (s *Store) takeNudge() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nudged
	s.nudged = false
	return n
}

func (s *Store) setWake(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake = f
}

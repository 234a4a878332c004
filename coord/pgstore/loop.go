package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/store"
)

// pruneEvery is how many heartbeats pass between two prunes of the events
// table; pruneKeep is how many transactions' events a prune keeps, so that a
// listening connection that dropped can replay what it missed.
const (
	pruneEvery = 30
	pruneKeep  = 100_000
)

// hookBeforeBeat, when set by a test, runs on the session goroutine before
// every heartbeat: blocking in it pauses the session as SIGSTOP would.
var hookBeforeBeat func(*Store)

// errNudged is why the session goroutine dropped a working listening
// connection: a call lost its own (see Store.nudge).
var errNudged = errors.New("pgstore: a call lost its connection to postgres")

// retryDelay is the pause between two connection attempts while suspended.
const retryDelay = 100 * time.Millisecond

// loop is the session goroutine. It owns the listening connection conn,
// on which it waits for notifications (watch events), sends a heartbeat
// every third of the session timeout and, when the heartbeat sees expired
// sessions, reaps them. A lost connection makes the session StateSuspended;
// it reconnects, and resumes the session (StateConnected, same id) if the
// database still has it, or declares it StateLost (locally once the session
// timeout has passed since its last heartbeat was sent, or when the database
// says it expired) and opens a new one.
func (s *Store) loop(conn *pgx.Conn) {
	defer close(s.loopDone)
	ctx := s.ctx
	hb := s.cfg.SessionTimeout / 3
	lastHB := time.Now()
	beats := 0
	for {
		if ctx.Err() != nil {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
			return
		}
		if conn == nil {
			s.checkLost()
			dctx, dcancel := s.dialContext(ctx)
			c, err := s.dial(dctx)
			dcancel()
			if err == nil {
				if err = s.startSession(ctx, c, false); err != nil {
					_ = c.Close(context.Background())
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					s.log.Debug("reconnect failed", "err", err)
				}
				sleep(ctx, retryDelay)
				continue
			}
			conn, lastHB = c, time.Now()
			continue
		}
		if wait := hb - time.Since(lastHB); wait <= 0 {
			if hookBeforeBeat != nil {
				hookBeforeBeat(s)
			}
			sent := time.Now()
			if err := s.beat(ctx, conn, beats%pruneEvery == 0); err != nil {
				s.suspend(conn, err)
				conn = nil
				continue
			}
			beats++
			lastHB = sent
			continue
		}
		if s.takeNudge() {
			s.suspend(conn, errNudged)
			conn = nil
			continue
		}
		wctx, wcancel := context.WithTimeout(ctx, hb-time.Since(lastHB))
		s.setWake(wcancel)
		n, err := conn.WaitForNotification(wctx)
		s.setWake(nil)
		wcancel()
		if err != nil {
			if ctx.Err() != nil || ((errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !conn.IsClosed()) {
				continue
			}
			s.suspend(conn, err)
			conn = nil
			continue
		}
		if err := s.onNotify(ctx, conn, n.Payload); err != nil {
			s.suspend(conn, err)
			conn = nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// current returns the live session id, 0 when there is none (lost).
func (s *Store) current() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess.State == store.StateLost || s.sess.State == store.StateConnecting {
		return 0
	}
	return s.sess.ID
}

// beat sends a heartbeat on conn. The database judges the session by its
// own clock: a session whose expires_at has passed is gone even if no one
// reaped it yet. A gone session is declared lost and a new one opened on
// conn. When the heartbeat sees expired sessions it reaps them; prune also
// trims the events table.
func (s *Store) beat(ctx context.Context, conn *pgx.Conn, prune bool) error {
	id := s.current()
	sent := time.Now()
	hctx, cancel := context.WithTimeout(ctx, s.cfg.SessionTimeout/3)
	defer cancel()
	var reapDue bool
	err := conn.QueryRow(hctx, "UPDATE "+s.q+".sessions SET expires_at = clock_timestamp() + timeout_ms * interval '1 millisecond'"+
		" WHERE id = $1 AND expires_at > clock_timestamp()"+
		" RETURNING EXISTS (SELECT 1 FROM "+s.q+".sessions WHERE expires_at < clock_timestamp())", id).Scan(&reapDue)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		s.lose(id, "expired on the server (the database's clock passed its timeout since the last heartbeat)")
		if err := s.startSession(ctx, conn, false); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		s.lastOK = sent
	}
	if reapDue {
		if err := s.reap(hctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reaping expired sessions failed; the next heartbeat retries", "err", err)
		}
	}
	if prune {
		if _, err := conn.Exec(hctx, "DELETE FROM "+s.q+".events WHERE zxid <= (SELECT zxid FROM "+s.q+".txn) - $1", pruneKeep); err != nil {
			return err
		}
	}
	return nil
}

// startSession runs on a fresh listening connection (LISTEN already
// issued): it resumes the current session or, when there is none or the
// database no longer has it, ends the lost one and opens a new one; then it
// catches up on the events it missed and publishes StateConnected.
func (s *Store) startSession(ctx context.Context, conn *pgx.Conn, fresh bool) error {
	id := s.current()
	sent := time.Now()
	if id != 0 {
		var ok bool
		err := conn.QueryRow(ctx, "UPDATE "+s.q+".sessions SET expires_at = clock_timestamp() + timeout_ms * interval '1 millisecond'"+
			" WHERE id = $1 AND expires_at > clock_timestamp() RETURNING true", id).Scan(&ok)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			s.lose(id, "expired on the server while disconnected")
			id = 0
		case err != nil:
			return err
		}
	}
	if id == 0 {
		s.mu.Lock()
		old := s.oldID
		s.mu.Unlock()
		if old != 0 && s.pool != nil {
			if err := s.endSessions(ctx, []int64{old}); err != nil {
				return err
			}
			s.mu.Lock()
			s.oldID = 0
			s.mu.Unlock()
		}
		sent = time.Now()
		err := conn.QueryRow(ctx, "INSERT INTO "+s.q+".sessions (id, timeout_ms, expires_at)"+
			" VALUES (nextval('"+s.q+".session_ids'), $1::int, clock_timestamp() + $1::int * interval '1 millisecond') RETURNING id",
			s.cfg.SessionTimeout.Milliseconds()).Scan(&id)
		if err != nil {
			return mapSetupErr(s.cfg.Schema, "open a session", err)
		}
		fresh = true
	}
	if err := s.catchUp(ctx, conn, fresh); err != nil {
		return err
	}
	s.lastOK = sent
	s.takeNudge() // calls that failed while disconnected: this connection is new
	s.publish(id, store.StateConnected)
	return nil
}

// suspend drops the listening connection after err.
// The pool's connections went the same way, most likely (a cut path, a
// restarted server): they are dropped too, so that the calls after the
// session resumes do not fail on them.
func (s *Store) suspend(conn *pgx.Conn, err error) {
	_ = conn.Close(context.Background())
	s.pool.Reset()
	s.mu.Lock()
	st, id := s.sess.State, s.sess.ID
	s.mu.Unlock()
	if st == store.StateConnected {
		s.log.Warn("connection to postgres lost; session suspended", "session", fmt.Sprintf("0x%x", id), "err", err)
		s.publish(id, store.StateSuspended)
	}
}

// dialContext bounds a reconnection attempt of a suspended session by the
// moment it would be declared lost, so that checkLost runs on time.
func (s *Store) dialContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s.mu.Lock()
	st := s.sess.State
	s.mu.Unlock()
	if st == store.StateSuspended {
		if dl := s.lastOK.Add(s.cfg.SessionTimeout); time.Until(dl) > 0 {
			return context.WithDeadline(ctx, dl)
		}
	}
	return context.WithCancel(ctx)
}

// checkLost declares a suspended session lost once the session timeout has
// passed since its last heartbeat was sent: by then the database may have
// expired it.
func (s *Store) checkLost() {
	s.mu.Lock()
	st, id := s.sess.State, s.sess.ID
	s.mu.Unlock()
	if st == store.StateSuspended && time.Since(s.lastOK) >= s.cfg.SessionTimeout {
		s.lose(id, fmt.Sprintf("disconnected for the session timeout %v", s.cfg.SessionTimeout))
	}
}

// lose declares session id lost: its watches end with ErrSessionExpired
// and it is ended on the server at the next connect.
func (s *Store) lose(id int64, why string) {
	if id == 0 {
		return
	}
	err := fmt.Errorf("pgstore: session 0x%x %s: %w", id, why, store.ErrSessionExpired)
	s.log.Warn("session lost", "session", fmt.Sprintf("0x%x", id), "why", why)
	s.mu.Lock()
	s.oldID = id
	s.mu.Unlock()
	s.reg.endSession(err)
	s.publish(id, store.StateLost)
}

// reap ends the sessions whose time is up by the database's clock.
func (s *Store) reap(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, "SELECT id FROM "+s.q+".sessions WHERE expires_at < clock_timestamp()")
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(ids) == 0 {
		return err
	}
	return s.endSessionsIf(ctx, ids, true)
}

// endSessions ends sessions ids now: their ephemeral nodes are deleted in
// one transaction, whose events fire the watches on them.
func (s *Store) endSessions(ctx context.Context, ids []int64) error {
	return s.endSessionsIf(ctx, ids, false)
}

func (s *Store) endSessionsIf(ctx context.Context, ids []int64, onlyExpired bool) error {
	cond := ""
	if onlyExpired {
		cond = " AND expires_at < clock_timestamp()"
	}
	return s.txn(ctx, "end sessions", 0, func(ctx context.Context, ts *txState) error {
		rows, err := ts.tx.Query(ctx, "DELETE FROM "+s.q+".sessions WHERE id = ANY($1)"+cond+" RETURNING id", ids)
		if err != nil {
			return err
		}
		dead, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(dead) == 0 {
			return errNothing
		}
		rows, err = ts.tx.Query(ctx, "DELETE FROM "+s.q+".nodes WHERE ephemeral_owner = ANY($1) RETURNING path, parent", dead)
		if err != nil {
			return err
		}
		type gone struct{ path, parent string }
		nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gone, error) {
			var g gone
			err := r.Scan(&g.path, &g.parent)
			return g, err
		})
		if err != nil {
			return err
		}
		counts := map[string]int32{}
		var parents []string
		for _, g := range nodes {
			if counts[g.parent] == 0 {
				parents = append(parents, g.parent)
			}
			counts[g.parent]++
			ts.event(store.EventNodeDeleted, g.path)
			ts.event(store.EventNodeChildrenChanged, g.parent)
		}
		if len(parents) == 0 {
			return nil
		}
		ns := make([]int32, len(parents))
		for i, p := range parents {
			ns[i] = counts[p]
		}
		_, err = ts.tx.Exec(ctx, "UPDATE "+s.q+".nodes n SET num_children = n.num_children - d.c, cversion = n.cversion + d.c, pzxid = $3"+
			" FROM unnest($1::text[], $2::int[]) AS d(p, c) WHERE n.path = d.p", parents, ns, ts.zxid)
		return err
	})
}

// EndSession ends session id at once, as an operator ending a stuck
// process's session would: its ephemeral nodes are deleted in one
// transaction and its watchers notified; its store learns it at its next
// heartbeat (StateLost, then a new session). Ending a session that is gone
// already is not an error.
func (s *Store) EndSession(ctx context.Context, id int64) error {
	_, ctx, end, err := s.begin(ctx, "end session")
	if err != nil {
		return err
	}
	defer end()
	return s.mapErr(ctx, "end session", s.endSessions(ctx, []int64{id}))
}

package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/store"
)

// maxPayload bounds a notification's payload, below Postgres's 8000-byte
// limit: a transaction whose events do not fit notifies its zxid alone, and
// listeners read its events from the events table.
const maxPayload = 7000

// notice is the payload of a transaction's notification: its zxid and, when
// they fit, its events as [type, path] pairs.
type notice struct {
	Z int64         `json:"z"`
	E []noticeEvent `json:"e,omitempty"`
	F bool          `json:"f,omitempty"` // events not included: read them from the table
}

type noticeEvent struct {
	T store.EventType
	P string
}

func (e noticeEvent) MarshalJSON() ([]byte, error) { return json.Marshal([]any{e.T, e.P}) }

func (e *noticeEvent) UnmarshalJSON(b []byte) error {
	var pair [2]json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if err := json.Unmarshal(pair[0], &e.T); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &e.P)
}

// encodeNotice returns the payload for transaction zxid's events.
func encodeNotice(zxid int64, evs []event) string {
	n := notice{Z: zxid, E: make([]noticeEvent, len(evs))}
	for i, ev := range evs {
		n.E[i] = noticeEvent{T: ev.typ, P: ev.path}
	}
	b, _ := json.Marshal(n)
	if len(b) > maxPayload {
		b, _ = json.Marshal(notice{Z: zxid, F: true})
	}
	return string(b)
}

// onNotify dispatches one notification. A transaction whose events were not
// in the payload, or transactions skipped before it (none are, as commits
// notify in zxid order, but a replay costs nothing), are read from the
// events table on conn.
func (s *Store) onNotify(ctx context.Context, conn *pgx.Conn, payload string) error {
	var n notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		s.log.Warn("ignoring a malformed notification", "payload", payload, "err", err)
		return nil
	}
	last := s.reg.lastZxid()
	if n.Z <= last {
		return nil
	}
	if n.F || n.Z > last+1 {
		return s.replay(ctx, conn, last, n.Z)
	}
	evs := make([]event, len(n.E))
	for i, e := range n.E {
		evs[i] = event{zxid: n.Z, typ: e.T, path: e.P}
	}
	s.reg.dispatch(n.Z, evs)
	return nil
}

// replay dispatches the events of the transactions in (after, upto] from
// the events table, in zxid order. It reports errGap when the table no
// longer holds all of them.
func (s *Store) replay(ctx context.Context, conn *pgx.Conn, after, upto int64) error {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.SessionTimeout/3)
	defer cancel()
	var oldest *int64
	if err := conn.QueryRow(qctx, "SELECT min(zxid) FROM "+s.q+".events").Scan(&oldest); err != nil {
		return err
	}
	if oldest == nil || *oldest > after+1 {
		return errGap
	}
	rows, err := conn.Query(qctx, "SELECT zxid, type, path FROM "+s.q+".events WHERE zxid > $1 AND zxid <= $2 ORDER BY zxid, ord", after, upto)
	if err != nil {
		return err
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (event, error) {
		var ev event
		var t int16
		err := r.Scan(&ev.zxid, &t, &ev.path)
		ev.typ = store.EventType(t)
		return ev, err
	})
	if err != nil {
		return err
	}
	for z := after + 1; z <= upto; z++ {
		var mine []event
		for len(evs) > 0 && evs[0].zxid == z {
			mine, evs = append(mine, evs[0]), evs[1:]
		}
		s.reg.dispatch(z, mine)
	}
	return nil
}

// errGap means the events table no longer holds every transaction since the
// last dispatched one: the armed watches are checked against their nodes.
var errGap = errors.New("pgstore: events since the last dispatched transaction were pruned")

// catchUp runs on a fresh listening connection after LISTEN: every
// transaction committed from now on is notified on it, and the ones
// committed since the last dispatched are replayed from the events table,
// so no armed watch misses a change made while the connection was down (as
// ZooKeeper's set-watches). fresh (a new session, no armed watches) only
// starts after the current zxid.
func (s *Store) catchUp(ctx context.Context, conn *pgx.Conn, fresh bool) error {
	var cur int64
	if err := conn.QueryRow(ctx, "SELECT zxid FROM "+s.q+".txn WHERE id = 1").Scan(&cur); err != nil {
		return err
	}
	last := s.reg.lastZxid()
	if fresh || cur <= last {
		s.reg.setLast(cur)
		return nil
	}
	err := s.replay(ctx, conn, last, cur)
	if !errors.Is(err, errGap) {
		return err
	}
	s.log.Warn("events since the connection dropped were pruned; checking every armed watch against its node", "since", last, "now", cur)
	s.reg.setLast(cur)
	for _, w := range s.reg.armed() {
		if err := s.checkWatch(ctx, conn, w); err != nil {
			return err
		}
	}
	return nil
}

// querier is a connection or the pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkWatch fires w if its node changed after w.since in a way its kind
// sees (ZooKeeper's set-watches rules): used when the events in between are
// not at hand.
func (s *Store) checkWatch(ctx context.Context, q querier, w *watch) error {
	var czxid, mzxid, pzxid *int64
	err := q.QueryRow(ctx, "SELECT n.czxid, n.mzxid, n.pzxid FROM (SELECT 1) d LEFT JOIN "+s.q+".nodes n ON n.path = $1", w.path).
		Scan(&czxid, &mzxid, &pzxid)
	if err != nil {
		return err
	}
	var typ store.EventType
	switch {
	case czxid == nil && (w.existed || w.kind != store.WatchExist):
		typ = store.EventNodeDeleted
	case czxid == nil:
		return nil
	case !w.existed && w.kind == store.WatchExist:
		typ = store.EventNodeCreated
	case *czxid > w.since:
		typ = store.EventNodeDeleted // deleted and created again
	case w.kind == store.WatchChild && *pzxid > w.since:
		typ = store.EventNodeChildrenChanged
	case w.kind != store.WatchChild && *mzxid > w.since:
		typ = store.EventNodeDataChanged
	default:
		return nil
	}
	s.reg.fireIfArmed(w, store.Event{Type: typ, Path: w.path})
	return nil
}

// errNothing ends a transaction function that found nothing to do: the
// transaction rolls back, consuming no zxid.
var errNothing = errors.New("pgstore: nothing to do")

// txState is one write transaction: its zxid, the database's time when it
// took the zxid, and the events it makes.
type txState struct {
	tx   pgx.Tx
	zxid int64
	now  time.Time
	evs  []event
}

func (ts *txState) event(t store.EventType, path string) {
	ts.evs = append(ts.evs, event{zxid: ts.zxid, typ: t, path: path})
}

// txn runs fn in a write transaction. It first takes the next zxid by
// incrementing the txn row, which holds the row's lock until commit: writers
// are serialized, so zxids are given in commit order and one transaction's
// checks are never invalidated by another's. Then, when sess is not 0, it
// checks (by the database's clock) that the session is alive: a session
// that expired, say while its process was paused, commits nothing
// (store.ErrSessionExpired). After fn it records the events and notifies
// them; the notification is delivered after the commit, in commit order.
func (s *Store) txn(ctx context.Context, what string, sess int64, fn func(context.Context, *txState) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.mapErr(ctx, what, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	ts := &txState{tx: tx}
	b.Queue("UPDATE " + s.q + ".txn SET zxid = zxid + 1 WHERE id = 1 RETURNING zxid, clock_timestamp()").QueryRow(func(r pgx.Row) error {
		return r.Scan(&ts.zxid, &ts.now)
	})
	alive := true
	if sess != 0 {
		b.Queue("SELECT EXISTS (SELECT 1 FROM "+s.q+".sessions WHERE id = $1 AND expires_at > clock_timestamp())", sess).QueryRow(func(r pgx.Row) error {
			return r.Scan(&alive)
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return s.mapErr(ctx, what, err)
	}
	if !alive {
		return fmt.Errorf("pgstore: %s: session 0x%x expired on the server: %w", what, sess, store.ErrSessionExpired)
	}
	if hookAfterZxid != nil {
		hookAfterZxid(what, ts.zxid)
	}
	if err := fn(ctx, ts); err != nil {
		if errors.Is(err, errNothing) {
			return nil
		}
		return err
	}
	types := make([]int16, len(ts.evs))
	paths := make([]string, len(ts.evs))
	for i, ev := range ts.evs {
		types[i], paths[i] = int16(ev.typ), ev.path
	}
	b = &pgx.Batch{}
	if len(ts.evs) > 0 {
		b.Queue("INSERT INTO "+s.q+".events (zxid, ord, type, path) SELECT $1, u.o, u.t, u.p FROM unnest($2::smallint[], $3::text[]) WITH ORDINALITY AS u(t, p, o)",
			ts.zxid, types, paths)
	}
	b.Queue("SELECT pg_notify($1, $2)", s.channel, encodeNotice(ts.zxid, ts.evs))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return s.mapErr(ctx, what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.mapErr(ctx, what, err)
	}
	return nil
}

// hookAfterZxid, when set by a test, runs in every write transaction right
// after it took its zxid, before it commits.
var hookAfterZxid func(what string, zxid int64)

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// hooks installs pgstore's test hooks for this test and removes them after
// every store it opens has closed (call it before opening them).
func hooks(t *testing.T, afterZxid func(string, int64), beforeBeat func(*pgstore.Store)) {
	t.Helper()
	pgstore.SetHooks(afterZxid, beforeBeat)
	t.Cleanup(func() { pgstore.SetHooks(nil, nil) })
}

func adminConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestZxidsFollowCommitOrder holds a writer (writer A, an administrator's
// transaction doing what a write does: take the next zxid from the txn row,
// stamp /a with it) between taking its zxid and committing, while a store
// writes /b. The store may not commit a larger zxid before A commits: it
// waits on the txn row's lock. (With ids from a sequence, taken before
// commit, it commits first, and A then commits a SMALLER zxid: a fencing
// epoch going back.)
func TestZxidsFollowCommitOrder(t *testing.T) {
	dsn, schema := freshSchema(t)
	b := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	for _, p := range []string{"/a", "/b"} {
		if _, err := b.Create(testCtx(t), p, nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	a := adminConn(t, dsn)
	tx, err := a.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var zA int64
	if err := tx.QueryRow(testCtx(t), "UPDATE "+schema+".txn SET zxid = zxid + 1 WHERE id = 1 RETURNING zxid").Scan(&zA); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(testCtx(t), "UPDATE "+schema+".nodes SET mzxid = $1, version = version + 1 WHERE path = '/a'", zA); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		_, err := b.Set(testCtx(t), "/b", []byte("b"), store.AnyVersion)
		bDone <- err
	}()
	// B either commits (the bug) or waits on a lock (the mechanism).
	conn := adminConn(t, dsn)
	bFirst := false
	err = testwait.Poll(testCtx(t), func(ctx context.Context) error {
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatalf("writer B: %v", err)
			}
			bFirst = true
			return nil
		default:
		}
		var waiting int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+schema+"%multi%'").Scan(&waiting); err != nil {
			return err
		}
		if waiting == 0 {
			return errors.New("writer B neither committed nor waits on a lock")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatalf("writer A: %v", err)
	}
	if !bFirst {
		if err := testwait.Recv(t, 10*time.Second, "writer B's commit", bDone); err != nil {
			t.Fatalf("writer B: %v", err)
		}
	}
	_, sa, _ := b.Get(testCtx(t), "/a")
	_, sb, _ := b.Get(testCtx(t), "/b")
	if sa.Mzxid != zA {
		t.Fatalf("/a Mzxid %d, want the held writer's %d", sa.Mzxid, zA)
	}
	if bFirst {
		t.Fatalf("writer B committed zxid %d while writer A, holding zxid %d, had not committed: a later commit then carries a smaller id", sb.Mzxid, sa.Mzxid)
	}
	if sb.Mzxid <= sa.Mzxid {
		t.Fatalf("B committed after A with zxid %d, not above A's %d", sb.Mzxid, sa.Mzxid)
	}
}

// TestPausedSessionIsExpiredByTheDatabase pauses a store's session goroutine
// (no heartbeats, as under SIGSTOP) past its timeout. The database's clock
// expires it: a peer's heartbeat reaps it, deleting its ephemeral node in one
// transaction (the peer's watch fires), a write the paused store tries is
// refused with ErrSessionExpired (fails without the session check in every
// write transaction), and once resumed the store reports StateLost, then a
// new session.
func TestPausedSessionIsExpiredByTheDatabase(t *testing.T) {
	dsn, schema := freshSchema(t)
	var victim *pgstore.Store
	var mu sync.Mutex
	paused, resume := make(chan struct{}), make(chan struct{})
	var once, resumeOnce sync.Once
	unpause := func() { resumeOnce.Do(func() { close(resume) }) }
	hooks(t, nil, func(s *pgstore.Store) {
		mu.Lock()
		v := victim
		mu.Unlock()
		if s == v {
			once.Do(func() {
				close(paused)
				<-resume
			})
		}
	})
	peer := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	v := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	t.Cleanup(unpause) // before v's Close, on a failure
	if _, err := v.Create(testCtx(t), "/eph", nil, store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Create(testCtx(t), "/data", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, _, ch, err := peer.ExistsW(testCtx(t), "/eph")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := v.Session()
	mu.Lock()
	victim = v
	mu.Unlock()
	testwait.Recv(t, 10*time.Second, "the victim's session goroutine paused", paused)
	ev := testwait.Recv(t, 5*testSessionTimeout, "the peer's watch on the expired ephemeral", ch)
	if ev.Type != store.EventNodeDeleted || ev.Path != "/eph" {
		t.Fatalf("peer's watch: %v %s, want deleted /eph", ev.Type, ev.Path)
	}
	if _, err := v.Set(testCtx(t), "/data", []byte("late"), store.AnyVersion); !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("a write of the expired (paused) session: %v, want ErrSessionExpired", err)
	}
	if data, _, _ := peer.Get(testCtx(t), "/data"); len(data) != 0 {
		t.Fatalf("/data holds %q: the expired session's write committed", data)
	}
	// Every state the victim publishes from here, in order: reading
	// Session after a change may miss StateLost, which lasts only until the
	// new session is inserted (seen at load: "connected 0x3").
	published := make(chan store.Session, 16)
	pgstore.SetPublishHook(func(s *pgstore.Store, sess store.Session) {
		if s == v {
			select {
			case published <- sess:
			default:
			}
		}
	})
	t.Cleanup(func() { pgstore.SetPublishHook(nil) })
	unpause()
	after := awaitState(t, v, 10*time.Second, "a new session", func(s store.Session) bool {
		return s.State == store.StateConnected && s.ID != before.ID
	})
	var seen []string
	lostFirst := false
	for len(published) > 0 {
		sess := <-published
		seen = append(seen, fmt.Sprintf("%v 0x%x", sess.State, sess.ID))
		if sess.State == store.StateLost && sess.ID == before.ID {
			lostFirst = true
		}
		if sess.State == store.StateConnected && sess.ID != before.ID {
			break
		}
	}
	if !lostFirst {
		t.Fatalf("after the pause: %v, want lost 0x%x before the new session", seen, before.ID)
	}
	if _, err := v.Create(testCtx(t), "/eph", nil, store.Ephemeral); err != nil {
		t.Fatalf("re-create the ephemeral on the new session 0x%x: %v", after.ID, err)
	}
}

// TestShortDisconnectResumesAndReplaysWatches cuts a store's connections for
// less than its timeout while a peer changes a node it watches: the store is
// StateSuspended, resumes the SAME session, and the watch fires on
// reconnection, from the events table (fails without the replay: the
// notification was sent while the listening connection was down).
func TestShortDisconnectResumesAndReplaysWatches(t *testing.T) {
	dsn, schema := freshSchema(t)
	p := integration.NewProxy(t, hostOf(t, dsn))
	peer := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	w := open(t, pgstore.Config{DSN: dsnVia(t, dsn, p.Addr()), Schema: schema, SessionTimeout: 10 * time.Second, MaxConns: 1})
	if _, err := peer.Create(testCtx(t), "/n", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(testCtx(t), "/eph", nil, store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	_, _, ch, err := w.GetW(testCtx(t), "/n")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := w.Session()
	p.Cut()
	awaitState(t, w, 10*time.Second, "suspended", func(s store.Session) bool { return s.State == store.StateSuspended })
	if _, err := peer.Set(testCtx(t), "/n", []byte("x"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Get(testCtx(t), "/n"); !errors.Is(err, store.ErrConnectionLoss) {
		t.Fatalf("Get while suspended: %v, want ErrConnectionLoss", err)
	}
	p.Restore()
	after := awaitState(t, w, 10*time.Second, "connected again", func(s store.Session) bool { return s.State == store.StateConnected })
	if after.ID != before.ID {
		t.Fatalf("session 0x%x after a short disconnect, want the same 0x%x", after.ID, before.ID)
	}
	ev := testwait.Recv(t, 10*time.Second, "the watch on a node changed while disconnected", ch)
	if ev.Type != store.EventNodeDataChanged || ev.Path != "/n" {
		t.Fatalf("watch: %v %s, want data-changed /n", ev.Type, ev.Path)
	}
	if ok, st, _ := peer.Exists(testCtx(t), "/eph"); !ok || st.EphemeralOwner != before.ID {
		t.Fatalf("the resumed session's ephemeral: exists %v owner 0x%x, want it owned by 0x%x", ok, st.EphemeralOwner, before.ID)
	}
}

// TestWatchesCheckedWhenMissedEventsWerePruned empties the events table
// while a store is disconnected: on reconnection it cannot replay, so it
// checks every armed watch against its node (ZooKeeper's set-watches) and
// fires the ones whose node changed (fails without that fallback).
func TestWatchesCheckedWhenMissedEventsWerePruned(t *testing.T) {
	dsn, schema := freshSchema(t)
	p := integration.NewProxy(t, hostOf(t, dsn))
	peer := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	w := open(t, pgstore.Config{DSN: dsnVia(t, dsn, p.Addr()), Schema: schema, SessionTimeout: 10 * time.Second, MaxConns: 1})
	for _, n := range []string{"/changed", "/same", "/parent"} {
		if _, err := peer.Create(testCtx(t), n, nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	_, _, changed, err := w.GetW(testCtx(t), "/changed")
	if err != nil {
		t.Fatal(err)
	}
	_, _, same, err := w.GetW(testCtx(t), "/same")
	if err != nil {
		t.Fatal(err)
	}
	_, _, kids, err := w.ChildrenW(testCtx(t), "/parent")
	if err != nil {
		t.Fatal(err)
	}
	_, _, born, err := w.ExistsW(testCtx(t), "/born")
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	awaitState(t, w, 10*time.Second, "suspended", func(s store.Session) bool { return s.State == store.StateSuspended })
	if _, err := peer.Set(testCtx(t), "/changed", []byte("x"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Create(testCtx(t), "/parent/c", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Create(testCtx(t), "/born", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := adminConn(t, dsn).Exec(testCtx(t), "DELETE FROM "+schema+".events"); err != nil {
		t.Fatal(err)
	}
	p.Restore()
	for _, c := range []struct {
		ch   <-chan store.Event
		typ  store.EventType
		path string
	}{{changed, store.EventNodeDataChanged, "/changed"}, {kids, store.EventNodeChildrenChanged, "/parent"}, {born, store.EventNodeCreated, "/born"}} {
		ev := testwait.Recv(t, 10*time.Second, "watch on "+c.path, c.ch)
		if ev.Type != c.typ || ev.Path != c.path {
			t.Fatalf("watch on %s: %v %s, want %v", c.path, ev.Type, ev.Path, c.typ)
		}
	}
	select {
	case ev := <-same:
		t.Fatalf("watch on the unchanged /same fired: %v", ev.Type)
	default:
	}
}

// TestLargeTransactionNotifiesThroughTheTable makes a Multi whose events do
// not fit a notification's payload (Postgres refuses over 8000 bytes): it
// commits, and a watcher still sees its events, read from the events table.
func TestLargeTransactionNotifiesThroughTheTable(t *testing.T) {
	dsn, schema := freshSchema(t)
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	w := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	long := strings.Repeat("x", 200)
	var ops []store.Op
	for i := range 60 {
		ops = append(ops, &store.CreateOp{Path: "/" + long + string(rune('A'+i%26)) + strings.Repeat("y", i/26), Mode: store.Persistent})
	}
	last := ops[len(ops)-1].(*store.CreateOp).Path
	_, _, ch, err := w.ExistsW(testCtx(t), last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Multi(testCtx(t), ops...); err != nil {
		t.Fatalf("Multi of %d creates: %v", len(ops), err)
	}
	ev := testwait.Recv(t, 10*time.Second, "the watch on the last node of a large Multi", ch)
	if ev.Type != store.EventNodeCreated || ev.Path != last {
		t.Fatalf("watch: %v %s, want created", ev.Type, ev.Path)
	}
}

// TestMultiOverTheRequestLimit: a Multi larger than MaxRequestBytes fails
// with ErrTooLarge and applies nothing, and the store states its limit
// (store.RequestLimiter), so coord splits below it as on ZooKeeper.
func TestMultiOverTheRequestLimit(t *testing.T) {
	dsn, schema := freshSchema(t)
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema, MaxRequestBytes: 4096})
	if got := store.RequestLimit(st); got != 4096 {
		t.Fatalf("RequestLimit %d, want 4096", got)
	}
	ops := []store.Op{
		&store.CreateOp{Path: "/small", Mode: store.Persistent},
		&store.CreateOp{Path: "/big", Data: make([]byte, 5000), Mode: store.Persistent},
	}
	if _, err := st.Multi(testCtx(t), ops...); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Multi over the limit: %v, want ErrTooLarge", err)
	}
	if ok, _, _ := st.Exists(testCtx(t), "/small"); ok {
		t.Fatal("a refused Multi created /small")
	}
}

// TestGrants: a role without the documented grants gets ErrPermission
// naming them and creates nothing; with them (the schema made by its owner)
// it works.
func TestGrants(t *testing.T) {
	dsn, schema := freshSchema(t)
	conn := adminConn(t, dsn)
	role := schema + "_role"
	if _, err := conn.Exec(testCtx(t), "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	u := strings.Replace(dsn, "shardflow:shardflow@", role+":pw@", 1)
	_, err := pgstore.Open(testCtx(t), pgstore.Config{DSN: u, Schema: schema, Logger: testLogger()})
	if !errors.Is(err, pgstore.ErrPermission) || !strings.Contains(err.Error(), "CREATE on the database") {
		t.Fatalf("Open without grants: %v, want ErrPermission naming the grants", err)
	}
	var n int
	if err := conn.QueryRow(testCtx(t), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s after a refused Open: count %d (%v), want none", schema, n, err)
	}
	owner := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	if _, err := owner.Create(testCtx(t), "/x", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE ON SEQUENCE " + schema + ".session_ids TO " + role,
	} {
		if _, err := conn.Exec(testCtx(t), g); err != nil {
			t.Fatal(err)
		}
	}
	st := open(t, pgstore.Config{DSN: u, Schema: schema})
	if _, err := st.Create(testCtx(t), "/x/y", nil, store.Ephemeral); err != nil {
		t.Fatalf("Create with the documented grants: %v", err)
	}
}

// TestCallThatLosesItsConnectionSuspends ends the server side of a store's
// call connections (not of its listening one): the call fails with
// ErrConnectionLoss, and the store goes StateSuspended, then StateConnected
// on the same session, as ZooKeeper's client does after a connection loss
// (coord waits for that change before it retries; without it a join waited
// for good).
func TestCallThatLosesItsConnectionSuspends(t *testing.T) {
	dsn, schema := freshSchema(t)
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema, MaxConns: 1})
	if _, err := st.Create(testCtx(t), "/n", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	before, changed := st.Session()
	admin := adminConn(t, dsn)
	var callErr error
	for range 20 { // pgxpool pings a connection idle for over 1 s and replaces a dead one: retry until a call meets it
		if _, err := admin.Exec(testCtx(t), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'shardflow-pgstore'"); err != nil {
			t.Fatal(err)
		}
		if _, _, callErr = st.Get(testCtx(t), "/n"); callErr != nil {
			break
		}
	}
	if !errors.Is(callErr, store.ErrConnectionLoss) {
		t.Fatalf("Get on a terminated connection: %v, want ErrConnectionLoss", callErr)
	}
	testwait.Recv(t, 10*time.Second, "a session state change after the connection loss", changed)
	if cur, _ := st.Session(); cur.State != store.StateSuspended && cur.State != store.StateConnected {
		t.Fatalf("after a connection loss: %v, want suspended (then connected)", cur.State)
	}
	after := awaitState(t, st, 10*time.Second, "connected again", func(s store.Session) bool { return s.State == store.StateConnected })
	if after.ID != before.ID {
		t.Fatalf("session 0x%x after a lost call connection, want the same 0x%x", after.ID, before.ID)
	}
	if _, _, err := st.Get(testCtx(t), "/n"); err != nil {
		t.Fatalf("Get after reconnecting: %v", err)
	}
}

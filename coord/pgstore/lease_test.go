package pgstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestWritesRenewTheSession: a session whose heartbeats are held back but
// whose writes commit stays alive past its timeout, and one that neither
// writes nor beats expires when its timeout has passed since its last
// heartbeat, not before. The store's time source is the database's clock
// (a session lives while expires_at > clock_timestamp()); the test moves
// it by moving every deadline of the two sessions back (advance), which is
// what the clock moving forward does to them, so nothing sleeps. Fails
// before writes renewed the lease: the writer's Set after 1.35 timeouts
// got ErrSessionExpired.
func TestWritesRenewTheSession(t *testing.T) {
	const timeout = 10 * time.Minute // no heartbeat is due in the test's own time
	dsn, schema := freshSchema(t)
	held := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	hooks(t, nil, func(*pgstore.Store) { <-held }) // every heartbeat held
	writer := open(t, pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: timeout})
	idle := open(t, pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: timeout})
	t.Cleanup(release) // before the stores' Close
	if _, err := writer.Create(testCtx(t), "/w", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	ws, _ := writer.Session()
	is, _ := idle.Session()
	admin := adminConn(t, dsn)
	sessions := pgx.Identifier{schema, "sessions"}.Sanitize()
	advance := func(d time.Duration) {
		t.Helper()
		if _, err := admin.Exec(testCtx(t), "UPDATE "+sessions+" SET expires_at = expires_at - $1::bigint * interval '1 millisecond' WHERE id = ANY($2)",
			d.Milliseconds(), []int64{ws.ID, is.ID}); err != nil {
			t.Fatal(err)
		}
	}
	alive := func(id int64) bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(testCtx(t), "SELECT EXISTS (SELECT 1 FROM "+sessions+" WHERE id = $1 AND expires_at > clock_timestamp())", id).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Four steps of 0.45 timeouts: 1.8 timeouts after the last heartbeat.
	step := timeout * 45 / 100
	for i := 1; i <= 4; i++ {
		advance(step)
		since := time.Duration(i) * step
		if got, want := alive(is.ID), since < timeout; got != want {
			t.Fatalf("the idle session %v after its last heartbeat (timeout %v): alive %v, want %v", since, timeout, got, want)
		}
		if !alive(ws.ID) {
			t.Fatalf("the writing session %v after its last heartbeat: expired, though it wrote %v ago", since, step)
		}
		if _, err := writer.Set(testCtx(t), "/w", fmt.Appendf(nil, "%d", i), store.AnyVersion); err != nil {
			t.Fatalf("write %d, %v after the writer's last heartbeat: %v", i, since, err)
		}
	}
	if _, err := idle.Create(testCtx(t), "/late", nil, store.Persistent); !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("a write of the idle session past its timeout: %v, want ErrSessionExpired", err)
	}
}

// TestARefusedWriteRenewsNothing: a write the store refuses leaves its
// session's lease where it was, and a committed write of the session in
// the same batch after a refused one still renews it (the refusal rolls
// its renewal back; multi_batch_v3 then checks the session again). Fails
// without the reset of v_live in the refusal handler: the batch of a
// refused and a committed write left the lease at a tenth of the timeout.
func TestARefusedWriteRenewsNothing(t *testing.T) {
	const timeout = 10 * time.Minute
	dsn, schema := freshSchema(t)
	held := make(chan struct{})
	var once sync.Once
	hooks(t, nil, func(*pgstore.Store) { <-held })
	writer := open(t, pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: timeout})
	t.Cleanup(func() { once.Do(func() { close(held) }) })
	if _, err := writer.Create(testCtx(t), "/w", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	ws, _ := writer.Session()
	admin := adminConn(t, dsn)
	sessions := pgx.Identifier{schema, "sessions"}.Sanitize()
	const advanceSQL = "UPDATE %s SET expires_at = expires_at - $1::bigint * interval '1 millisecond' WHERE id = $2"
	left := func() time.Duration {
		t.Helper()
		var ms float64
		if err := admin.QueryRow(testCtx(t), "SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 FROM "+sessions+" WHERE id = $1", ws.ID).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	if _, err := admin.Exec(testCtx(t), fmt.Sprintf(advanceSQL, sessions), (timeout / 2).Milliseconds(), ws.ID); err != nil {
		t.Fatal(err)
	}
	before := left()
	if _, err := writer.Create(testCtx(t), "/w", nil, store.Persistent); !errors.Is(err, store.ErrNodeExists) {
		t.Fatalf("create of an existing node: %v, want ErrNodeExists", err)
	}
	if after := left(); after > before {
		t.Fatalf("a refused write moved the lease: %v left before, %v after", before, after)
	}

	// One batch of a refused write and a committed one: a first write
	// waits for the txn row (held by a transaction of the test's), the two
	// queue behind it and go together once it is done.
	var mu sync.Mutex
	var flushes []int
	pgstore.SetFlushHook(func(n int) { mu.Lock(); flushes = append(flushes, n); mu.Unlock() })
	t.Cleanup(func() { pgstore.SetFlushHook(nil) })
	locker := adminConn(t, dsn)
	tx, err := locker.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(testCtx(t)) }()
	if _, err := tx.Exec(testCtx(t), "SELECT zxid FROM "+pgx.Identifier{schema, "txn"}.Sanitize()+" WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	errs := make([]chan error, 3)
	send := func(i int, write func() error) {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- write() }()
	}
	queued := func(want int) {
		t.Helper()
		testwait.For(t, 10*time.Second, fmt.Sprintf("%d writes queued behind the one in flight", want), func() bool {
			f, q := pgstore.Writes(writer)
			return f == 1 && q == want
		})
	}
	exists := func() error { _, err := writer.Create(testCtx(t), "/w", nil, store.Persistent); return err }
	send(0, exists)
	queued(0)
	send(1, exists)
	queued(1)
	send(2, func() error { _, err := writer.Set(testCtx(t), "/w", []byte("x"), store.AnyVersion); return err })
	queued(2)
	// The clock moves while they wait: a tenth of the timeout left.
	if _, err := tx.Exec(testCtx(t), fmt.Sprintf(advanceSQL, sessions), (timeout * 4 / 10).Milliseconds(), ws.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{store.ErrNodeExists, store.ErrNodeExists, nil} {
		err := testwait.Recv(t, 10*time.Second, fmt.Sprintf("write %d", i), errs[i])
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("write %d: %v, want %v", i, err, want)
		}
	}
	mu.Lock()
	got := fmt.Sprint(flushes)
	mu.Unlock()
	if got != "[1 2]" {
		t.Fatalf("batches of %s requests, want [1 2] (the refused and the committed write together)", got)
	}
	if l := left(); l < timeout/2 {
		t.Fatalf("after a batch of a refused and a committed write: %v of the %v lease left, want it renewed", l, timeout)
	}
}

// TestSchemaUpgradeFromVersion2: a schema of version 2 (multi_batch only)
// is migrated by the first store of this version to open (version 3,
// multi_batch_v3 beside the old function), and a store of version 2
// opening on it later (its migration sets version 2 again and replaces
// only multi_batch, simulated here) changes nothing for this version's
// stores: their writes go on committing and renewing, and the next to
// open sets version 3 again.
func TestSchemaUpgradeFromVersion2(t *testing.T) {
	dsn, schema := freshSchema(t)
	a := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	admin := adminConn(t, dsn)
	q := pgx.Identifier{schema}.Sanitize()
	version := func() int {
		t.Helper()
		var v int
		if err := admin.QueryRow(testCtx(t), "SELECT version FROM "+q+".meta WHERE id = 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(); v != 3 {
		t.Fatalf("a fresh schema at version %d, want 3", v)
	}
	// What version 2 left: its function, not the new one.
	if _, err := admin.Exec(testCtx(t), "DROP FUNCTION "+q+".multi_batch_v3; UPDATE "+q+".meta SET version = 2"); err != nil {
		t.Fatal(err)
	}
	b := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	if v := version(); v != 3 {
		t.Fatalf("after a store of this version opened on version 2: version %d, want 3", v)
	}
	for i, s := range []*pgstore.Store{a, b} {
		if _, err := s.Create(testCtx(t), fmt.Sprintf("/after-upgrade-%d", i), nil, store.Persistent); err != nil {
			t.Fatalf("store %d writes after the upgrade: %v", i, err)
		}
	}
	// A store of version 2 opens: its migration sets version 2.
	if _, err := admin.Exec(testCtx(t), "UPDATE "+q+".meta SET version = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(testCtx(t), "/beside-version-2", nil, store.Persistent); err != nil {
		t.Fatalf("a write beside a store of version 2: %v", err)
	}
	open(t, pgstore.Config{DSN: dsn, Schema: schema})
	if v := version(); v != 3 {
		t.Fatalf("the next store of this version to open left version %d, want 3", v)
	}
}

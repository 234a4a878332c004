package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestCloseEndsCallsInFlight holds a store's read behind a table lock (as a
// partition or a stuck database would) and closes the store: the read ends
// at once with ErrClosed and Close returns, instead of both waiting for the
// database (fails without the call's ctx bound to the store: the read and
// Close waited for the lock; simulation seeds 3500119, 3500164, 3500290).
func TestCloseEndsCallsInFlight(t *testing.T) {
	dsn, schema := freshSchema(t)
	st := open(t, pgstore.Config{DSN: dsn, Schema: schema})
	if _, err := st.Create(testCtx(t), "/n", []byte("x"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t, dsn)
	tx, err := admin.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(release)
	if _, err := tx.Exec(testCtx(t), "LOCK TABLE "+pgx.Identifier{schema, "nodes"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, _, err := st.Get(context.Background(), "/n")
		got <- err
	}()
	// Polled from a connection of its own: admin is in tx, and a
	// transaction sees pg_stat_activity as it was at its first read of it
	// (a snapshot kept until the transaction ends), so a poll made before
	// the read reached the lock saw it never arrive (the test failed at
	// load 24, 'waited 10s for the read waiting for the lock').
	watch := adminConn(t, dsn)
	testwait.For(t, 10*time.Second, "the read waiting for the lock", func() bool {
		var n int
		err := watch.QueryRow(testCtx(t), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, schema+`".nodes`).Scan(&n)
		return err == nil && n > 0
	})
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	err = testwait.Recv(t, 10*time.Second, "the read in flight to end when the store closes", got)
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("the read in flight at Close: %v, want ErrClosed", err)
	}
	release() // Close ends the session next, which deletes from the table
	if err := testwait.Recv(t, 10*time.Second, "Close to return", closed); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestSchemaNameFitsTheNotifyChannel: the NOTIFY channel is the schema
// behind a 16-character prefix and Postgres cuts names at 63 bytes, so a
// schema of 48 characters is refused, naming the field, and one of 47
// works (a 50-character schema used to open and then fail every write).
func TestSchemaNameFitsTheNotifyChannel(t *testing.T) {
	dsn, _ := freshSchema(t)
	_, err := pgstore.Open(testCtx(t), pgstore.Config{DSN: dsn, Schema: strings.Repeat("s", 48)})
	if !errors.Is(err, pgstore.ErrInvalidConfig) || !strings.Contains(err.Error(), "Schema") || !strings.Contains(err.Error(), "at most 47") {
		t.Fatalf("a 48-character schema: %v, want ErrInvalidConfig naming Schema and its limit", err)
	}
	long := strings.Repeat("l", 47)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+long+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})
	st := open(t, pgstore.Config{DSN: dsn, Schema: long})
	if _, err := st.Create(testCtx(t), "/n", nil, store.Persistent); err != nil {
		t.Fatalf("a write in a 47-character schema: %v", err)
	}
}

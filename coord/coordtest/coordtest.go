// Package coordtest is the protocol suite of package coord, runnable on any
// coordination store: Run executes every protocol test against a Backend.
// coord's own tests run it on memstore; the integration harness runs it on
// real ZooKeeper by supplying a Backend whose fault hooks cut connections
// (or that skips the tests it cannot fault).
package coordtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
)

// Backend opens sessions on one coordination service and injects faults.
type Backend interface {
	// Connect opens a new session (one simulated process). The backend
	// closes it at test cleanup.
	Connect(t testing.TB) store.Store
	// Kill makes st's session die as in a crash: its ephemeral nodes vanish
	// and st stays unusable (StateLost) afterwards. Skip the test if the
	// backend cannot.
	Kill(t testing.TB, st store.Store)
	// Expire expires st's session; st then reconnects with a new session.
	Expire(t testing.TB, st store.Store)
	// Disconnect cuts st's connection without expiring the session
	// (StateSuspended); Reconnect restores it within the session timeout.
	Disconnect(t testing.TB, st store.Store)
	Reconnect(t testing.TB, st store.Store)
	// SkewServerClock shifts the service's clock by d (0 restores it).
	SkewServerClock(t testing.TB, d time.Duration)
}

// Mem is a Backend on one memstore.Server. Its sessions commit their Multis
// through a group committer (memstore.WithGroupCommit), as zkstore does by
// default, so that the protocol tests and the simulation cover that path.
func Mem() Backend { return &memBackend{srv: memstore.NewServer()} }

type memBackend struct{ srv *memstore.Server }

func (b *memBackend) Connect(t testing.TB) store.Store {
	s := b.srv.Connect(memstore.WithGroupCommit())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Kill cuts the connection and has the server expire the session at once:
// the handle stays StateLost, as a crashed process's session does.
func (b *memBackend) Kill(t testing.TB, st store.Store) {
	s := unwrap(st).(*memstore.Session)
	s.Disconnect()
	s.Expire()
	if sess, _ := s.Session(); sess.State != store.StateLost {
		t.Fatalf("killed memstore session is %s, want lost", sess.State)
	}
}

func (b *memBackend) Expire(t testing.TB, st store.Store) { unwrap(st).(*memstore.Session).Expire() }

// SessionTimeout is the timeout of the sessions Connect opens: a session
// disconnected this long expires.
func (b *memBackend) SessionTimeout() time.Duration { return memstore.DefaultSessionTimeout }

func (b *memBackend) Disconnect(t testing.TB, st store.Store) {
	s := unwrap(st).(*memstore.Session)
	s.Disconnect()
}

func (b *memBackend) Reconnect(t testing.TB, st store.Store) {
	unwrap(st).(*memstore.Session).Reconnect()
}

func (b *memBackend) SkewServerClock(t testing.TB, d time.Duration) {
	if d == 0 {
		b.srv.SetClock(nil)
		return
	}
	b.srv.SetClock(func() time.Time { return time.Now().Add(d) })
}

// unwrap strips a request counter (storecount.Store).
func unwrap(st store.Store) store.Store {
	if c, ok := st.(*storecount.Store); ok {
		return c.Store
	}
	return st
}

// quietLogger discards protocol logs in tests.
// Set COORDTEST_LOG=1 to see them on stderr.
func quietLogger() *slog.Logger {
	if os.Getenv("COORDTEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// processStart is when the test binary started, read outside any synctest
// bubble: a bubble's clock starts in 2000, before it.
var processStart = time.Now()

// testCtx returns the context of a test's store calls. Outside a synctest
// bubble it ends with the test, or a minute before the test binary's own
// deadline (-timeout), so that a hung call fails its test with its error
// while the binary still has time to report; it has no bound of its own: a
// fixed 20 s over a test's whole run failed TestProtocolPostgres/Admin at
// load 50 ("Remove of a stopped job: context deadline exceeded" after 21 s
// of steps), which says how busy the machine was, not what the protocol
// did. In a bubble (whose clock reads before processStart) time is the
// bubble's own, so the 20 s there measure no machine, and t.Deadline may
// not be called.
func testCtx(t testing.TB) context.Context {
	if time.Now().Before(processStart) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dt.Deadline(); ok {
			if until := d.Add(-time.Minute); time.Until(until) > 0 {
				d = until
			}
			ctx, cancel = context.WithDeadline(context.Background(), d)
		}
	}
	t.Cleanup(cancel)
	return ctx
}

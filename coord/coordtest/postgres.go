package coordtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/faultproxy"
)

// DefaultPostgresSessionTimeout is PostgresConfig.SessionTimeout's default.
const DefaultPostgresSessionTimeout = 2 * time.Second

// PostgresConfig configures Postgres.
type PostgresConfig struct {
	// DSN is the URL ("postgres://...") of the server to test against
	// (required), e.g. integration.SharedPostgres(t).DSN(). Its role must
	// be allowed to create schemas.
	DSN string
	// SessionTimeout is every session's timeout.
	// Default DefaultPostgresSessionTimeout.
	SessionTimeout time.Duration
	// MaxConns is every session's pool size (pgstore.Config.MaxConns).
	// Default 2: the simulation runs many stores at once on one server.
	MaxConns int
	// EndSessions makes Kill and Expire end the session on the server at
	// once (pgstore.Store.EndSession), instead of waiting for the database
	// to expire it a session timeout later: then a long SessionTimeout
	// costs the faults no time, and only the faults end sessions.
	EndSessions bool
}

// Postgres returns a Backend on a real Postgres server (coord/pgstore),
// every session in one schema of the Backend's own (dropped at the end of
// t) and behind its own faultproxy.Proxy, so a fault hits exactly one
// simulated process:
//
//   - Kill cuts that session's proxy for good: the handle goes
//     StateSuspended, then StateLost; the database expires the session a
//     session timeout after its last heartbeat (at once with EndSessions).
//   - Expire cuts the proxy until the store declares the session lost (with
//     EndSessions: ends it on the server and restores the path at once);
//     the store then opens a new session.
//   - Disconnect and Reconnect cut and restore the proxy; a Reconnect within
//     the session timeout resumes the same session.
//   - SkewServerClock skews the local clock instead (see LocalClock).
func Postgres(t testing.TB, cfg PostgresConfig) Backend {
	t.Helper()
	if cfg.DSN == "" {
		t.Fatal("coordtest.Postgres: PostgresConfig.DSN is empty; pass a Postgres URL such as integration.SharedPostgres(t).DSN()")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultPostgresSessionTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 2
	}
	u, err := url.Parse(cfg.DSN)
	if err != nil || u.Host == "" {
		t.Fatalf("coordtest.Postgres: DSN %q is not a postgres:// URL with a host", cfg.DSN)
	}
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "5432")
	}
	b := &pgBackend{
		cfg:     cfg,
		url:     u,
		addr:    addr,
		schema:  fmt.Sprintf("coordtest_%d_%d", time.Now().UnixNano()%1e9, nsCounter.Add(1)),
		proxies: map[store.Store]*faultproxy.Proxy{},
	}
	// Dropped at the end: registered before any session, so it runs after
	// every session's cleanup.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, cfg.DSN)
		if err != nil {
			t.Logf("coordtest: cannot drop schema %s: %v", b.schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+b.schema+" CASCADE"); err != nil {
			t.Logf("coordtest: drop schema %s: %v", b.schema, err)
		}
	})
	// The admin session (endSession) lives as long as the backend, t: it
	// is shared by t's parallel subtests, so closing it with the subtest
	// that opened it ended another's EndSession with "store: closed"
	// (TestProtocolPostgres/EpochAfterOthersFailover in make test).
	t.Cleanup(func() {
		b.mu.Lock()
		a := b.admin
		b.admin = nil
		b.mu.Unlock()
		if a != nil {
			_ = a.Close()
		}
	})
	return b
}

type pgBackend struct {
	cfg    PostgresConfig
	url    *url.URL
	addr   string
	schema string
	skew   atomic.Int64

	mu      sync.Mutex
	proxies map[store.Store]*faultproxy.Proxy
	admin   *pgstore.Store // EndSessions: the session that ends the others
}

// ForSchedule returns a Backend like b on a schema of its own, dropped at
// the end of t: the simulation gives each schedule its own tree, so that
// concurrent schedules do not receive each other's notifications (every
// store of a schema hears every write of it, as every process of one
// deployment does).
func (b *pgBackend) ForSchedule(t testing.TB) Backend { return Postgres(t, b.cfg) }

// Schema returns the schema every session of the Backend opens in, for a
// process outside the test to join the same tree.
func (b *pgBackend) Schema() string { return b.schema }

// open opens a session through host. A connection attempt (SCRAM
// authentication included, CPU work on both ends) gets as long as the
// session may go unanswered, never less than pgstore's default: under a
// loaded machine 5 s attempts failed "failed SASL auth: timeout", each retry
// starting the handshake over (Postgres seed 54200540 at load 45-100). Open
// as a whole gets what the backend gives a session to come back after a
// restore (Reconnect), never less than pgstore's default.
func (b *pgBackend) open(host string) (*pgstore.Store, error) {
	u := *b.url
	u.Host = host
	return pgstore.Open(context.Background(), pgstore.Config{
		DSN:            u.String(),
		Schema:         b.schema,
		SessionTimeout: b.cfg.SessionTimeout,
		DialTimeout:    max(pgstore.DefaultDialTimeout, b.cfg.SessionTimeout),
		ConnectTimeout: max(pgstore.DefaultConnectTimeout, b.reconnectBound()),
		MaxConns:       b.cfg.MaxConns,
		Logger:         quietLogger(),
	})
}

// reconnectBound is how long the backend waits for a session to come back
// (or a new one) after a restore.
func (b *pgBackend) reconnectBound() time.Duration { return 4*b.cfg.SessionTimeout + 5*time.Second }

// Connect opens a session through a new proxy in the Backend's schema.
func (b *pgBackend) Connect(t testing.TB) store.Store {
	t.Helper()
	p := faultproxy.New(t, b.addr)
	st, err := b.open(p.Addr())
	if err != nil {
		t.Fatalf("coordtest: open a Postgres session via proxy %s to %s: %v", p.Addr(), b.addr, err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		b.mu.Lock()
		delete(b.proxies, st)
		b.mu.Unlock()
	})
	b.mu.Lock()
	b.proxies[st] = p
	b.mu.Unlock()
	return st
}

func (b *pgBackend) proxy(t testing.TB, st store.Store) *faultproxy.Proxy {
	t.Helper()
	b.mu.Lock()
	p := b.proxies[unwrap(st)]
	b.mu.Unlock()
	if p == nil {
		t.Fatalf("coordtest: store %p was not opened by this Postgres backend's Connect", st)
	}
	return p
}

// endSession ends id on the server through the Backend's admin session
// (opened on first use, straight to the server, closed with the backend's t).
func (b *pgBackend) endSession(t testing.TB, id int64) {
	t.Helper()
	b.mu.Lock()
	admin := b.admin
	b.mu.Unlock()
	if admin == nil {
		st, err := b.open(b.addr)
		if err != nil {
			t.Fatalf("coordtest: open the admin session: %v", err)
		}
		b.mu.Lock()
		if b.admin == nil {
			b.admin, admin = st, st
			b.mu.Unlock()
		} else {
			admin = b.admin
			b.mu.Unlock()
			_ = st.Close()
		}
	}
	// One request: unanswered for a session timeout, it is stalled (as
	// stallCtx judges the simulation's calls); never less than testCtx's.
	ctx, cancel := context.WithTimeout(context.Background(), max(20*time.Second, b.cfg.SessionTimeout))
	defer cancel()
	if err := admin.EndSession(ctx, id); err != nil {
		t.Fatalf("coordtest: end Postgres session 0x%x: %v", id, err)
	}
}

// Kill cuts st's proxy for good (EndSessions: ends its session, then
// closes the proxy: nothing of the dead process reaches the server again,
// and its store's attempts, such as Close's end of the session, are refused
// at once instead of held for a DialTimeout).
func (b *pgBackend) Kill(t testing.TB, st store.Store) {
	t.Helper()
	p := b.proxy(t, st)
	sess, _ := st.Session()
	p.Cut()
	if b.cfg.EndSessions && sess.ID != 0 {
		b.endSession(t, sess.ID)
		p.Close()
	}
}

// Expire cuts st's proxy until st reports the session lost (EndSessions:
// ends it on the server and restores at once), then restores the path so
// that st opens a new session.
func (b *pgBackend) Expire(t testing.TB, st store.Store) {
	t.Helper()
	p := b.proxy(t, st)
	before, _ := st.Session()
	p.Cut()
	if b.cfg.EndSessions {
		b.endSession(t, before.ID)
		p.Restore()
	}
	awaitSession(t, st, b.reconnectBound(), "session lost after a cut", func(s store.Session) bool {
		return s.State == store.StateLost || s.ID != before.ID
	})
	p.Restore()
}

// Disconnect cuts st's proxy and waits until st reports StateSuspended.
func (b *pgBackend) Disconnect(t testing.TB, st store.Store) {
	t.Helper()
	b.proxy(t, st).Cut()
	awaitSession(t, st, b.cfg.SessionTimeout, "suspended after a cut", func(s store.Session) bool {
		return s.State == store.StateSuspended
	})
}

// Reconnect restores st's proxy and waits until st is connected again.
func (b *pgBackend) Reconnect(t testing.TB, st store.Store) {
	t.Helper()
	b.proxy(t, st).Restore()
	awaitSession(t, st, b.reconnectBound(), "connected after a restore", func(s store.Session) bool {
		return s.State == store.StateConnected
	})
}

// SessionTimeout is the timeout of every session.
func (b *pgBackend) SessionTimeout() time.Duration { return b.cfg.SessionTimeout }

// SkewServerClock records d; LocalNow returns the real time minus d.
func (b *pgBackend) SkewServerClock(_ testing.TB, d time.Duration) { b.skew.Store(int64(d)) }

// LocalNow returns time.Now() shifted back by the skew set last.
func (b *pgBackend) LocalNow() time.Time { return time.Now().Add(-time.Duration(b.skew.Load())) }

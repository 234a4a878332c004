package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/storetest"
	"github.com/shardflow/shardflow/integration"
)

// TestMain removes the shared Postgres container and checks for leaked
// goroutines (goleak) after the tests.
func TestMain(m *testing.M) { integration.Main(m) }

// testSessionTimeout is short so that expiry tests are fast, and long enough
// that -race on a loaded 2-core machine does not miss heartbeats.
const testSessionTimeout = 5 * time.Second

func testLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("PGSTORE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var schemaSeq atomic.Int64

// freshSchema returns the DSN of the shared Postgres and a schema name of
// this test's own, dropped at its end (register it before opening stores,
// so that they close first).
func freshSchema(t *testing.T) (dsn, schema string) {
	t.Helper()
	dsn = integration.SharedPostgres(t).DSN()
	schema = fmt.Sprintf("pgstore_t%d_%d", os.Getpid(), schemaSeq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return dsn, schema
}

// open opens a store on cfg (SessionTimeout and Logger filled in when
// empty) and closes it at the end of the test.
func open(t *testing.T, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = testSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	s, err := pgstore.Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dsnVia returns dsn with its host and port replaced by addr.
func dsnVia(t *testing.T, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("DSN %q: %v", dsn, err)
	}
	u.Host = addr
	return u.String()
}

func hostOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("DSN %q: %v", dsn, err)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return net.JoinHostPort(u.Host, "5432")
	}
	return u.Host
}

// awaitState follows s.Session() until ok holds, failing after d.
func awaitState(t *testing.T, s store.Store, d time.Duration, what string, ok func(store.Session) bool) store.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cur, err := store.AwaitSession(ctx, s, ok)
	if err != nil {
		t.Fatalf("%s: session still %v (id 0x%x) after %v", what, cur.State, cur.ID, d)
	}
	return cur
}

// harness runs the conformance suite on real Postgres. Every session goes
// through its own proxy, so Expire can partition exactly one session.
type harness struct {
	dsn    string
	schema string
	admin  *pgstore.Store

	mu      sync.Mutex
	proxies map[store.Store]*integration.Proxy
	roots   int
}

func (h *harness) NewSession(t *testing.T) store.Store {
	t.Helper()
	p := integration.NewProxy(t, hostOf(t, h.dsn))
	s, err := pgstore.Open(testCtx(t), pgstore.Config{
		DSN:            dsnVia(t, h.dsn, p.Addr()),
		Schema:         h.schema,
		SessionTimeout: testSessionTimeout,
		MaxConns:       2,
		Logger:         testLogger(),
	})
	if err != nil {
		t.Fatalf("Open via proxy %s: %v", p.Addr(), err)
	}
	h.mu.Lock()
	h.proxies[s] = p
	h.mu.Unlock()
	return s
}

// Expire partitions s from Postgres until the store declares the session
// lost (the session timeout after its last heartbeat; the database expires
// it at about the same time, by its own clock), then heals the path.
func (h *harness) Expire(t *testing.T, s store.Store) {
	t.Helper()
	h.mu.Lock()
	p := h.proxies[s]
	h.mu.Unlock()
	if p == nil {
		t.Fatalf("Expire: store was not opened by this harness")
	}
	before, _ := s.Session()
	p.Cut()
	awaitState(t, s, 4*testSessionTimeout, "Expire", func(cur store.Session) bool {
		return cur.State == store.StateLost || cur.ID != before.ID
	})
	p.Restore()
}

func (h *harness) Root(t *testing.T) string {
	t.Helper()
	h.mu.Lock()
	h.roots++
	p := fmt.Sprintf("/r%d", h.roots)
	h.mu.Unlock()
	if _, err := h.admin.Create(testCtx(t), p, nil, store.Persistent); err != nil {
		t.Fatalf("Root %s: %v", p, err)
	}
	return p
}

func TestConformance(t *testing.T) {
	dsn, schema := freshSchema(t)
	h := &harness{
		dsn:     dsn,
		schema:  schema,
		admin:   open(t, pgstore.Config{DSN: dsn, Schema: schema}),
		proxies: map[store.Store]*integration.Proxy{},
	}
	storetest.Run(t, h)
}

package zkstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/storetest"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
)

// TestMain removes the shared ZooKeeper container and checks for leaked
// goroutines (goleak) after the tests.
func TestMain(m *testing.M) {
	integration.Main(m)
}

// testSessionTimeout is short so that expiry tests are fast, and long enough
// that -race on a busy 2-core machine does not miss pings. The server needs
// tickTime <= 1s (it clamps sessions to 2x..20x tickTime); the harness's
// containers use 500ms.
const testSessionTimeout = 2 * time.Second

// zkServers returns the shared ZooKeeper: the one named by SHARDFLOW_ZK
// (host:port[,host:port], tickTime <= 1s), else a container started by the
// integration harness (the test is skipped without Docker, unless
// SHARDFLOW_REQUIRE_DOCKER is set). Every test and benchmark here gets its
// server from this one function; integration is imported only where a
// container is the subject: this one, TestMain, and zk_test.go's tests that
// stop and restart a server or an ensemble. coordtest's ZooKeeper backend
// wraps a server it is given and starts none (it has no testcontainers), so
// it cannot stand in for them.
func zkServers(t testing.TB) []string {
	t.Helper()
	return integration.SharedZooKeeper(t).Servers()
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open opens a store with cfg (Servers, SessionTimeout and Logger filled in
// when empty) and closes it at the end of the test.
func open(t *testing.T, cfg zkstore.Config) *zkstore.Store {
	t.Helper()
	if len(cfg.Servers) == 0 {
		cfg.Servers = zkServers(t)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = testSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	s, err := zkstore.Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var baseSeq atomic.Int64

// freshBase returns a new empty persistent path for one test, deleted at
// the end of it.
func freshBase(t *testing.T, admin store.Store) string {
	t.Helper()
	base := fmt.Sprintf("/zkstore-test-%d-%d", time.Now().UnixNano(), baseSeq.Add(1))
	if err := store.CreateAll(testCtx(t), admin, base); err != nil {
		t.Fatalf("create base %s: %v", base, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := store.DeleteAll(ctx, admin, base); err != nil {
			t.Logf("cleanup %s: %v", base, err)
		}
	})
	return base
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

// harness runs the conformance suite on real ZooKeeper through coordtest's
// ZooKeeper backend: every session goes through its own proxy, so Expire
// partitions exactly one session, and every session is under the backend's
// chroot.
type harness struct {
	b     coordtest.Backend
	admin store.Store
	roots atomic.Int64
}

func (h *harness) NewSession(t *testing.T) store.Store { return h.b.Connect(t) }

// Expire partitions s from ZooKeeper until the store declares the session
// lost (after the session timeout; the server expires it too), then heals
// the path. The store has retired the old client by then, so the session
// cannot be resumed: it reconnects with a new one.
func (h *harness) Expire(t *testing.T, s store.Store) { h.b.Expire(t, s) }

func (h *harness) Root(t *testing.T) string {
	t.Helper()
	p := fmt.Sprintf("/r%d", h.roots.Add(1))
	if _, err := h.admin.Create(testCtx(t), p, nil, store.Persistent); err != nil {
		t.Fatalf("Root %s: %v", p, err)
	}
	return p
}

func TestConformance(t *testing.T) {
	b := coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zkServers(t)[0], SessionTimeout: testSessionTimeout})
	storetest.Run(t, &harness{b: b, admin: b.Connect(t)})
}

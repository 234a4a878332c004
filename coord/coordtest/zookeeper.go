package coordtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/internal/faultproxy"
)

// LocalClock is an optional Backend capability for a service whose clock
// cannot be moved (a real ZooKeeper server): SkewServerClock(d) then shifts
// the servers' LOCAL clock by -d instead, which is the same skew seen from
// either side. The Harness hands LocalNow to every Registry it starts
// (coord.RegistryConfig.Now) and the suite passes it to Begin.
type LocalClock interface {
	// LocalNow returns the (possibly skewed) local time of the servers.
	LocalNow() time.Time
}

// DefaultZooKeeperSessionTimeout is ZooKeeperConfig.SessionTimeout's default:
// short so that crash and expiry tests are fast, long enough that -race on a
// busy 2-core machine does not miss pings. The server must allow it
// (minSessionTimeout = 2 x tickTime; the integration harness uses a 500 ms
// tickTime).
const DefaultZooKeeperSessionTimeout = 2 * time.Second

// ZooKeeperConfig configures ZooKeeper.
type ZooKeeperConfig struct {
	// Server is the client address (host:port) of the ZooKeeper server to
	// test against (required), e.g. integration.SharedZooKeeper(t).Servers()[0].
	Server string
	// SessionTimeout is requested for every session.
	// Default DefaultZooKeeperSessionTimeout.
	SessionTimeout time.Duration
}

// ZooKeeper returns a Backend on a real ZooKeeper server. Every session
// (Connect) dials through its own faultproxy.Proxy, so a fault hits exactly
// one simulated process:
//
//   - Kill cuts that session's proxy for good, as a crash or a permanent
//     partition: the handle goes StateSuspended, then StateLost after the
//     session timeout, and the server deletes the session's ephemeral nodes
//     only when it expires the session, about one session timeout later
//     (honest ZooKeeper behaviour: the suite waits for it, bounded).
//   - Expire cuts the proxy until the store declares the session lost (the
//     server expires it at about the same time), then restores it: the store
//     reconnects with a new session.
//   - Disconnect and Reconnect cut and restore the proxy; a Reconnect within
//     the session timeout resumes the same session.
//   - SkewServerClock skews the local clock instead (see LocalClock).
//
// Every session is opened under one chroot (zkstore.Config.Root) unique to
// the Backend, removed at the end of t. The Backend's methods are safe for
// concurrent use; its proxies and stores are closed in the cleanup of the
// test that created them.
func ZooKeeper(t testing.TB, cfg ZooKeeperConfig) Backend {
	t.Helper()
	if cfg.Server == "" {
		t.Fatal("coordtest.ZooKeeper: ZooKeeperConfig.Server is empty; pass a ZooKeeper client address such as integration.SharedZooKeeper(t).Servers()[0]")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultZooKeeperSessionTimeout
	}
	b := &zkBackend{
		cfg:     cfg,
		root:    fmt.Sprintf("/coordtest-%d-%d", time.Now().UnixNano(), nsCounter.Add(1)),
		proxies: map[store.Store]*faultproxy.Proxy{},
	}
	// Remove the tree at the end. Registered before any session, so it runs
	// after every session's cleanup: only a killed session's ephemerals may
	// remain, until the server expires them.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.SessionTimeout+5*time.Second)
		defer cancel()
		st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{cfg.Server}, SessionTimeout: cfg.SessionTimeout, Logger: quietLogger()})
		if err != nil {
			t.Logf("coordtest: cannot remove %s: %v", b.root, err)
			return
		}
		defer func() { _ = st.Close() }()
		for {
			err := store.DeleteAll(ctx, st, b.root)
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Logf("coordtest: remove %s: %v", b.root, err)
				return
			}
			time.Sleep(100 * time.Millisecond) // ephemerals of a killed session not expired yet
		}
	})
	return b
}

type zkBackend struct {
	cfg  ZooKeeperConfig
	root string
	skew atomic.Int64 // nanoseconds the service is ahead of the local clock

	mu      sync.Mutex
	proxies map[store.Store]*faultproxy.Proxy
}

// Connect opens a session through a new proxy under the Backend's chroot.
func (b *zkBackend) Connect(t testing.TB) store.Store {
	t.Helper()
	p := faultproxy.New(t, b.cfg.Server)
	st, err := zkstore.Open(testCtx(t), zkstore.Config{
		Servers:        []string{p.Addr()},
		SessionTimeout: b.cfg.SessionTimeout,
		Root:           b.root,
		Logger:         quietLogger(),
	})
	if err != nil {
		t.Fatalf("coordtest: open a ZooKeeper session via proxy %s to %s: %v", p.Addr(), b.cfg.Server, err)
	}
	// Registered after NewProxy's cleanup, so it runs first: the store
	// closes while its path still works and its ephemerals go at once.
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

func (b *zkBackend) proxy(t testing.TB, st store.Store) *faultproxy.Proxy {
	t.Helper()
	b.mu.Lock()
	p := b.proxies[unwrap(st)]
	b.mu.Unlock()
	if p == nil {
		t.Fatalf("coordtest: store %p was not opened by this ZooKeeper backend's Connect", st)
	}
	return p
}

// Root returns the chroot every session of the Backend opens under, for a
// process outside the test (a worker binary) to join the same tree.
func (b *zkBackend) Root() string { return b.root }

// Kill cuts st's proxy and never restores it. It returns at once: the
// session's ephemerals vanish when the server expires it, and st goes
// StateLost after its own session timeout.
func (b *zkBackend) Kill(t testing.TB, st store.Store) {
	t.Helper()
	b.proxy(t, st).Cut()
}

// Expire cuts st's proxy until st reports the session lost (or already
// replaced), then restores the path so that st opens a new session.
func (b *zkBackend) Expire(t testing.TB, st store.Store) {
	t.Helper()
	p := b.proxy(t, st)
	before, _ := st.Session()
	p.Cut()
	awaitSession(t, st, 4*b.cfg.SessionTimeout+5*time.Second, "session lost after a cut", func(s store.Session) bool {
		return s.State == store.StateLost || s.ID != before.ID
	})
	p.Restore()
}

// Disconnect cuts st's proxy and waits until st reports StateSuspended.
func (b *zkBackend) Disconnect(t testing.TB, st store.Store) {
	t.Helper()
	b.proxy(t, st).Cut()
	awaitSession(t, st, b.cfg.SessionTimeout, "suspended after a cut", func(s store.Session) bool {
		return s.State == store.StateSuspended
	})
}

// Reconnect restores st's proxy and waits until st is connected again: on
// the same session if the session timeout has not passed since Disconnect,
// else on a new one.
func (b *zkBackend) Reconnect(t testing.TB, st store.Store) {
	t.Helper()
	b.proxy(t, st).Restore()
	awaitSession(t, st, 4*b.cfg.SessionTimeout+5*time.Second, "connected after a restore", func(s store.Session) bool {
		return s.State == store.StateConnected
	})
}

// SkewServerClock records d; LocalNow returns the real time minus d.
func (b *zkBackend) SkewServerClock(_ testing.TB, d time.Duration) { b.skew.Store(int64(d)) }

// LocalNow returns time.Now() shifted back by the skew set last.
func (b *zkBackend) LocalNow() time.Time { return time.Now().Add(-time.Duration(b.skew.Load())) }

// awaitSession follows st.Session() until ok holds, failing the test after d.
func awaitSession(t testing.TB, st store.Store, d time.Duration, what string, ok func(store.Session) bool) store.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cur, err := store.AwaitSession(ctx, st, ok)
	if err != nil {
		t.Fatalf("coordtest: %s: session still %v (id 0x%x) after %v", what, cur.State, cur.ID, d)
	}
	return cur
}

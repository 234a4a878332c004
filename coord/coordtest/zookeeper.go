package coordtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
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
// (protocol.RegistryConfig.Now) and the suite passes it to Begin.
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
	// EndSessions makes Kill and Expire end the session on the server at
	// once, as ZooKeeper does when a client closes it (through a second
	// connection attached to the session with its id and password),
	// instead of waiting for the server to expire it a session timeout
	// later. Then a long SessionTimeout costs the faults no time, and only
	// the faults end sessions: a loaded machine that delays a ping for a
	// few seconds does not (the seeded simulation in go test).
	EndSessions bool
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
		creds:   map[*faultproxy.Proxy]*sessionCreds{},
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
	creds   map[*faultproxy.Proxy]*sessionCreds // EndSessions: the last handshake answer seen
}

// sessionCreds are a session's id and password, read off the server's
// handshake answer (ConnectResponse: int32 length, int32 protocolVersion,
// int32 timeOut, int64 sessionId, int32 passwd length, passwd).
type sessionCreds struct {
	id     int64
	passwd []byte
}

// zkHandshakeTap is how many bytes of the ConnectResponse hold the session
// id and a 16-byte password.
const zkHandshakeTap = 4 + 4 + 4 + 8 + 4 + 16

// Connect opens a session through a new proxy under the Backend's chroot.
func (b *zkBackend) Connect(t testing.TB) store.Store {
	t.Helper()
	p := faultproxy.New(t, b.cfg.Server)
	if b.cfg.EndSessions {
		p.TapReplies(zkHandshakeTap, func(first []byte) {
			if len(first) < zkHandshakeTap {
				return
			}
			n := int(binary.BigEndian.Uint32(first[20:24]))
			if binary.BigEndian.Uint32(first[8:12]) == 0 || n != 16 {
				return // a refused (expired) session: no credentials
			}
			c := &sessionCreds{id: int64(binary.BigEndian.Uint64(first[12:20])), passwd: slices.Clone(first[24:40])}
			b.mu.Lock()
			b.creds[p] = c
			b.mu.Unlock()
		})
	}
	// A handshake's time is the machine's: Open gets what Reconnect gives a
	// session to come back after a restore, never less than testCtx's 20 s.
	bound := max(20*time.Second, 4*b.cfg.SessionTimeout+5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	st, err := zkstore.Open(ctx, zkstore.Config{
		Servers:        []string{p.Addr()},
		SessionTimeout: b.cfg.SessionTimeout,
		ConnectTimeout: max(zkstore.DefaultConnectTimeout, bound),
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
	p := b.proxy(t, st)
	p.Cut()
	if b.cfg.EndSessions {
		b.endSession(t, p)
	}
}

// endSession ends p's current session on the server (EndSessions): it
// attaches a new connection, straight to the server, to the session with
// its id and password and closes it there, as a client's Close does. Its
// ephemeral nodes are gone when endSession returns. p must be cut (else
// the client would attach the session back).
func (b *zkBackend) endSession(t testing.TB, p *faultproxy.Proxy) {
	t.Helper()
	b.mu.Lock()
	c := b.creds[p]
	b.mu.Unlock()
	if c == nil {
		t.Fatalf("coordtest: no ZooKeeper session seen through proxy %s", p.Addr())
	}
	if err := closeZKSession(b.cfg.Server, c, b.cfg.SessionTimeout); err != nil {
		t.Fatalf("coordtest: end ZooKeeper session 0x%x: %v", c.id, err)
	}
}

// closeZKSession speaks just enough of ZooKeeper's protocol to attach to a
// session (ConnectRequest with its id and password) and close it
// (closeSession, opcode -11), and waits for the server's reply.
func closeZKSession(server string, c *sessionCreds, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", server, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd (length-prefixed), readOnly.
	var req []byte
	req = binary.BigEndian.AppendUint32(req, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(c.id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(c.passwd)))
	req = append(req, c.passwd...)
	req = append(req, 0)
	if err := writeFrame(conn, req); err != nil {
		return err
	}
	resp, err := readFrame(conn)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if len(resp) >= 8 && binary.BigEndian.Uint32(resp[4:8]) == 0 {
		return nil // expired already
	}
	// RequestHeader: xid, type closeSession.
	var cl []byte
	cl = binary.BigEndian.AppendUint32(cl, 1)
	cl = binary.BigEndian.AppendUint32(cl, uint32(0xfffffff5)) // -11
	if err := writeFrame(conn, cl); err != nil {
		return err
	}
	if _, err := readFrame(conn); err != nil {
		return fmt.Errorf("closeSession reply: %w", err)
	}
	return nil
}

func writeFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, body)
	return body, err
}

// Expire cuts st's proxy until st reports the session lost (or already
// replaced), then restores the path so that st opens a new session.
func (b *zkBackend) Expire(t testing.TB, st store.Store) {
	t.Helper()
	p := b.proxy(t, st)
	before, _ := st.Session()
	p.Cut()
	if b.cfg.EndSessions {
		// Ended on the server; the client learns it when it reconnects.
		b.endSession(t, p)
		p.Restore()
	}
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

// SessionTimeout is the timeout every session requests: the simulation
// counts a disconnect that long as a possible expiry.
func (b *zkBackend) SessionTimeout() time.Duration { return b.cfg.SessionTimeout }

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

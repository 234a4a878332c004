package zkstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dialer is the zk.Dialer of one client generation. It exists because the
// go-zookeeper client hides three things the store needs:
//   - its TCP connections, which Close must be able to cut so that no client
//     goroutine stays blocked on a frozen server (the handshake read waits up
//     to 6.7 session timeouts);
//   - the last error per address, which Open reports when nothing answers;
//   - the negotiated session timeout of each handshake (not exported), which
//     the Suspended -> Lost timer needs. It is read off the wire: the first
//     frame a server sends on a connection is the ConnectResponse.
//
// It also bounds the handshake, which the client waits for 10 receive
// timeouts (6.7 session timeouts): a connection accepted but never answered
// (a port proxy whose container is not up yet, a starting or frozen server)
// would otherwise hold the client past the session timeout, and a session
// that could have been resumed would be lost.
type dialer struct {
	timeout   time.Duration
	handshake time.Duration   // bound of the wait for the ConnectResponse
	ctx       context.Context // cancelled when the generation retires
	cancel    context.CancelFunc

	mu      sync.Mutex
	conns   map[*sniffConn]struct{}
	lastErr map[string]error // address -> last dial or handshake failure
	order   []string         // addresses in the order first tried

	// Written by the handshake read (client's loop goroutine) before the
	// client reports StateHasSession, read by the event callback.
	sessionID atomic.Int64
	timeoutMs atomic.Int32
}

// handshakeTimeout bounds the wait for a server's handshake answer: a third
// of the session timeout, so that after a stalled connection the client has
// time to resume the session on another attempt, and at least the dial
// timeout, so that a slow but healthy server is not cut off.
func handshakeTimeout(cfg Config) time.Duration {
	return max(cfg.DialTimeout, cfg.SessionTimeout/3)
}

func newDialer(timeout, handshake time.Duration) *dialer {
	ctx, cancel := context.WithCancel(context.Background())
	return &dialer{
		timeout:   timeout,
		handshake: handshake,
		ctx:       ctx,
		cancel:    cancel,
		conns:     make(map[*sniffConn]struct{}),
		lastErr:   make(map[string]error),
	}
}

// dial implements zk.Dialer. The client's own timeout (fixed at 1s) is
// replaced by Config.DialTimeout.
func (d *dialer) dial(network, address string, _ time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout)
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, seen := d.lastErr[address]; !seen {
		d.order = append(d.order, address)
	}
	if err != nil {
		d.lastErr[address] = err
		return nil, err
	}
	if d.ctx.Err() != nil { // retired while dialing
		_ = c.Close()
		return nil, net.ErrClosed
	}
	d.lastErr[address] = errNoHandshake
	sc := &sniffConn{Conn: c, d: d, addr: address}
	d.conns[sc] = struct{}{}
	return sc, nil
}

// errNoHandshake marks an address that accepted TCP but has not (yet)
// answered the ZooKeeper handshake.
var errNoHandshake = errors.New("TCP connected but no ZooKeeper handshake answer (not a ZooKeeper server, or it is overloaded or frozen)")

// retire cancels pending dials and cuts every open connection, which makes
// every client goroutine blocked on the network return.
func (d *dialer) retire() {
	d.cancel()
	d.mu.Lock()
	conns := make([]*sniffConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// dropConnections cuts the open connections without retiring: the client
// reconnects and resumes the same session if it can.
func (d *dialer) dropConnections() int {
	d.mu.Lock()
	conns := make([]*sniffConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// describe names every address tried and its last failure.
func (d *dialer) describe(servers []string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	parts := make([]string, 0, len(servers))
	for _, s := range servers {
		err, seen := d.lastErr[s]
		switch {
		case !seen:
			parts = append(parts, s+" (not tried yet)")
		case err == nil:
			parts = append(parts, s+" (connected)")
		default:
			parts = append(parts, fmt.Sprintf("%s (%v)", s, err))
		}
	}
	return strings.Join(parts, "; ")
}

// sniffConn is a net.Conn that decodes the first frame it reads, the
// ZooKeeper ConnectResponse: int32 length, int32 protocolVersion, int32
// timeOut (ms), int64 sessionId, buffer passwd[, bool readOnly].
type sniffConn struct {
	net.Conn
	d    *dialer
	addr string

	hdr       [20]byte // length + protocolVersion + timeOut + sessionId
	n         int
	done      bool // only touched by the reading goroutine
	closeOnce sync.Once
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		k := copy(c.hdr[c.n:], p[:n])
		c.n += k
		if c.n == len(c.hdr) {
			c.done = true
			timeout := int32(binary.BigEndian.Uint32(c.hdr[8:12]))
			sid := int64(binary.BigEndian.Uint64(c.hdr[12:20]))
			c.d.timeoutMs.Store(timeout)
			c.d.sessionID.Store(sid)
			c.d.mu.Lock()
			c.d.lastErr[c.addr] = nil
			c.d.mu.Unlock()
		}
	}
	return n, err
}

// SetReadDeadline bounds the client's deadline by the dialer's handshake
// timeout until the ConnectResponse has been read. The client sets its own
// (10 receive timeouts) for the frame's length and none for its body; both
// reads come before c.done is set, on the goroutine that sets it.
func (c *sniffConn) SetReadDeadline(t time.Time) error {
	if !c.done && c.d.handshake > 0 {
		if limit := time.Now().Add(c.d.handshake); t.IsZero() || t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *sniffConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return err
}

// hostProvider is a zk.HostProvider over a fixed list of addresses. Unlike
// the client's default DNS provider it resolves nothing at Init (which would
// fail a redial while DNS is down and pin stale addresses): the dialer
// resolves at every attempt. And unlike it, the first round of attempts
// after a lost connection is free: the default provider reports retryStart
// on the very first reconnect attempt to a one-server ensemble, which makes
// the client sleep a second and fail every queued call with ErrNoServer on
// each blip.
type hostProvider struct {
	mu      sync.Mutex
	servers []string
	curr    int
	tried   int // attempts since the last successful connection
}

func (hp *hostProvider) Init(servers []string) error {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.servers = append([]string(nil), servers...)
	hp.curr, hp.tried = -1, 0
	return nil
}

func (hp *hostProvider) Len() int {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return len(hp.servers)
}

// Next returns the next address; retryStart is true at the start of every
// round after the first one since the last successful connection: the
// client then pauses one second and fails its queued requests with
// ErrNoServer.
func (hp *hostProvider) Next() (string, bool) {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	n := len(hp.servers)
	hp.curr = (hp.curr + 1) % n
	hp.tried++
	retryStart := hp.tried > n && (hp.tried-1)%n == 0
	return hp.servers[hp.curr], retryStart
}

func (hp *hostProvider) Connected() {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.tried = 0
}

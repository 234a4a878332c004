// Package faultproxy is an in-process TCP proxy that cuts the path to a
// server like a network partition: the fault injector of the protocol suite
// (coord/coordtest) and the integration harness. A leaf package: it imports
// only the standard library, so the protocol suite builds without docker or
// testcontainers.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is an in-process TCP proxy on 127.0.0.1 in front of one target
// address, able to cut the path like a network partition. Clients connect to
// Addr instead of the target. Methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{} // client and target sides of live connections
	held   map[net.Conn]struct{} // connections accepted while cut, never forwarded
	tapN   int
	tap    func([]byte)
}

// TapReplies calls f with the first n bytes the target sends on every
// connection forwarded from now on (fewer if the connection ends first),
// before the client gets them: the handshake answer of a protocol, say.
// f runs on the connection's goroutine and must not block.
func (p *Proxy) TapReplies(n int, f func([]byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tapN, p.tap = n, f
}

// New starts a proxy to target (host:port) on a free port of 127.0.0.1.
// Its goroutines are stopped and waited for in t.Cleanup, or by Close.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, held: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut partitions the path: it drops every live connection (both sides are
// closed, so the target sees the client go too) and, until Restore, accepts
// new connections but forwards nothing on them, so clients hang as behind a
// partition rather than being refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore ends a Cut: connections held during the cut are forwarded now,
// with what their clients sent meanwhile, as a healed partition completes
// them, and new connections are forwarded again. A client waiting on a held
// connection (a ZooKeeper client's handshake) carries on at once; closing
// it instead would send the client into its reconnect back-off (go-zookeeper
// pauses a second before each later attempt).
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if p.closed {
		return
	}
	for c := range p.held {
		delete(p.held, c)
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// Close stops the proxy: it closes the listener and every connection and waits
// for all of its goroutines. It is safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.ln.Close()
		for c := range p.conns {
			_ = c.Close()
		}
		for c := range p.held {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			_ = client.Close()
		case p.cut:
			p.held[client] = struct{}{}
		default:
			p.conns[client] = struct{}{}
			p.wg.Add(1)
			go p.forward(client)
		}
		p.mu.Unlock()
	}
}

// forward dials the target for one client and copies both ways until either
// side ends or the proxy closes the connections.
func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	upstream, err := net.Dial("tcp", p.target)
	p.mu.Lock()
	if err != nil || p.closed || p.cut {
		p.mu.Unlock()
		_ = client.Close()
		if upstream != nil {
			_ = upstream.Close()
		}
		p.drop(client)
		return
	}
	p.conns[upstream] = struct{}{}
	tapN, tap := p.tapN, p.tap
	p.mu.Unlock()

	var pair sync.WaitGroup
	pair.Add(2)
	pipe := func(dst, src net.Conn) {
		defer pair.Done()
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, so the other copy returns too.
		_ = dst.Close()
		_ = src.Close()
	}
	go pipe(upstream, client)
	go func() {
		if tap != nil {
			first := make([]byte, tapN)
			n, _ := io.ReadFull(upstream, first)
			tap(first[:n])
			if _, err := client.Write(first[:n]); err != nil || n < tapN {
				pair.Done()
				_ = client.Close()
				_ = upstream.Close()
				return
			}
		}
		pipe(client, upstream)
	}()
	pair.Wait()
	p.drop(client, upstream)
}

func (p *Proxy) drop(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

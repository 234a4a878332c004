package main

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// raceCheckEnv turns on TestSetWatchesLastZxidRace. `make test` sets it
// together with the workspace of `make zk-overlay`; `make zk-race-proof`
// sets it once without the workspace (the race must be reported) and once
// with it (it must not be).
const raceCheckEnv = "SHARDFLOW_ZK_RACE_CHECK"

// TestSetWatchesLastZxidRace drives go-zookeeper into the accesses of
// go-zookeeper/zk#35 deterministically, against a scripted server on
// in-memory pipes: a watch is set, the connection drops, and on the new
// connection the server sends a reply carrying a zxid right after the
// handshake, before it reads anything. The client's recvLoop then writes
// lastZxid while its loop goroutine reads it in sendSetWatches, with no
// happens-before edge between the two, so the race detector reports it
// every time unless the patched copy made the accesses atomic.
func TestSetWatchesLastZxidRace(t *testing.T) {
	if !raceDetector {
		t.Skip("meaningful only under -race")
	}
	if os.Getenv(raceCheckEnv) == "" {
		t.Skipf("set %s=1 and build in the workspace of `make zk-overlay` (make test does both); without it this test reports go-zookeeper's known race", raceCheckEnv)
	}
	srv := newScriptedServer(t)
	hasSession := make(chan struct{}, 4)
	conn, events, err := zk.Connect([]string{"127.0.0.1:2181"}, 30*time.Second,
		zk.WithDialer(srv.dial),
		zk.WithHostProvider(&oneServer{}),
		zk.WithLogger(quiet{}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				hasSession <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events { // closed when the client's goroutines are done
		}
		srv.wait()
	}()
	<-hasSession

	if _, _, _, err := conn.ExistsW("/watched"); err != nil {
		t.Fatalf("ExistsW: %v", err)
	}
	srv.dropFirst()
	<-hasSession // second connection, same session
	<-srv.setWatches
	// A request answered after the early reply: once it returns, recvLoop
	// has handled that reply (and written lastZxid).
	if _, _, err := conn.Exists("/other"); err != nil {
		t.Fatalf("Exists after reconnect: %v", err)
	}
}

// scriptedServer speaks just enough of the ZooKeeper protocol: handshake,
// exists (always "no node"), setWatches, ping and close.
type scriptedServer struct {
	t          *testing.T
	mu         sync.Mutex
	conns      int
	first      net.Conn
	setWatches chan struct{}
	wg         sync.WaitGroup
}

func newScriptedServer(t *testing.T) *scriptedServer {
	return &scriptedServer{t: t, setWatches: make(chan struct{}, 1)}
}

// dial is the client's dialer: each connection is a pipe served by its own
// goroutine.
func (s *scriptedServer) dial(_, _ string, _ time.Duration) (net.Conn, error) {
	client, server := net.Pipe()
	s.mu.Lock()
	s.conns++
	n := s.conns
	if n == 1 {
		s.first = server
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer server.Close()
		s.serve(server, n)
	}()
	return client, nil
}

// dropFirst cuts the first connection, as a network failure would.
func (s *scriptedServer) dropFirst() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first.Close()
}

func (s *scriptedServer) wait() { s.wg.Wait() }

const (
	opExists     = 3
	opPing       = 11
	opClose      = -11
	opSetWatches = 101
	errNoNode    = -101
)

func (s *scriptedServer) serve(c net.Conn, n int) {
	if _, err := readPacket(c); err != nil { // connect request
		return
	}
	var resp []byte
	resp = binary.BigEndian.AppendUint32(resp, 0)      // protocol version
	resp = binary.BigEndian.AppendUint32(resp, 30000)  // session timeout, ms
	resp = binary.BigEndian.AppendUint64(resp, 0x5eed) // session id
	resp = binary.BigEndian.AppendUint32(resp, 16)     // password length
	resp = append(resp, make([]byte, 16)...)           // password
	if writePacket(c, resp) != nil {
		return
	}
	zxid := int64(10 * n)
	if n > 1 {
		// The reply that races: unsolicited, carrying a zxid, sent before
		// anything the client sends on this connection is read.
		if writePacket(c, replyHeader(1<<30, zxid, 0)) != nil {
			return
		}
	}
	for {
		req, err := readPacket(c)
		if err != nil || len(req) < 8 {
			return
		}
		xid := int32(binary.BigEndian.Uint32(req[0:4]))
		op := int32(binary.BigEndian.Uint32(req[4:8]))
		zxid++
		switch op {
		case opExists:
			err = writePacket(c, replyHeader(xid, zxid, errNoNode))
		case opSetWatches:
			s.setWatches <- struct{}{}
			err = writePacket(c, replyHeader(xid, zxid, 0))
		case opPing:
			err = writePacket(c, replyHeader(xid, 0, 0))
		case opClose:
			writePacket(c, replyHeader(xid, zxid, 0))
			return
		default:
			s.t.Errorf("scripted server: unexpected opcode %d", op)
			return
		}
		if err != nil {
			return
		}
	}
}

func replyHeader(xid int32, zxid int64, code int32) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, uint64(zxid))
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func readPacket(c net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c, body)
	return body, err
}

func writePacket(c net.Conn, body []byte) error {
	_, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body))))
	if err == nil {
		_, err = c.Write(body)
	}
	return err
}

// oneServer is a host provider without the default one's DNS look-up and
// its one-second pause before reconnecting to a one-server ensemble.
type oneServer struct{ server string }

func (h *oneServer) Init(servers []string) error { h.server = servers[0]; return nil }
func (h *oneServer) Len() int                    { return 1 }
func (h *oneServer) Next() (string, bool)        { return h.server, false }
func (h *oneServer) Connected()                  {}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

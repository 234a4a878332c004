package zkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
)

func TestWatchKindsFireOnTheEventsZooKeeperSends(t *testing.T) {
	events := []zk.EventType{zk.EventNodeCreated, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged, zk.EventNodeDeleted}
	want := map[watchKind][]bool{ // in the order of events
		watchData:  {false, true, false, true},
		watchExist: {true, true, false, true},
		watchChild: {false, false, true, true},
	}
	for kind, fires := range want {
		for i, ev := range events {
			if got := kind.fires(ev); got != fires[i] {
				t.Errorf("kind %d on %v: fires %v, want %v", kind, ev, got, fires[i])
			}
		}
	}
}

// chanW is a watch armed with a channel, as GetW and the like arm it.
type chanW struct {
	*watch
	ch <-chan store.Event
}

// chanWatchAdd arms a channel watch on r.
func chanWatchAdd(r *watchRegistry, full, p string, k watchKind, gen uint64) chanW {
	ch, fire := chanWatch()
	return chanW{r.add(full, p, k, gen, fire), ch}
}

func TestRegistryFiresEachWatchOnceAndOnlyForItsGeneration(t *testing.T) {
	r := newWatchRegistry()
	data := chanWatchAdd(r, "/ns/a", "/a", watchData, 1)
	child := chanWatchAdd(r, "/ns/a", "/a", watchChild, 1)
	newer := chanWatchAdd(r, "/ns/a", "/a", watchData, 2)

	r.dispatch(1, "/ns/a", zk.EventNodeDataChanged, store.EventNodeDataChanged)
	if ev := <-data.ch; ev.Type != store.EventNodeDataChanged || ev.Path != "/a" {
		t.Fatalf("data watch got %+v", ev)
	}
	if len(child.ch) != 0 || len(newer.ch) != 0 {
		t.Fatal("a data change fired a child watch or a watch of another generation")
	}
	r.dispatch(1, "/ns/a", zk.EventNodeDataChanged, store.EventNodeDataChanged)
	if len(data.ch) != 0 {
		t.Fatal("a one-shot watch fired twice")
	}
	if r.remove("/ns/a", data.watch) {
		t.Fatal("remove of a fired watch reported it armed")
	}

	r.invalidate(1, store.ErrSessionExpired)
	if ev := <-child.ch; ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrSessionExpired) {
		t.Fatalf("invalidated watch got %+v", ev)
	}
	if len(newer.ch) != 0 || r.count() != 1 {
		t.Fatalf("invalidating generation 1 touched generation 2 (count %d)", r.count())
	}

	r.closeAll(store.ErrClosed)
	if ev := <-newer.ch; ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrClosed) {
		t.Fatalf("closed watch got %+v", ev)
	}
	late := chanWatchAdd(r, "/ns/b", "/b", watchExist, 2)
	if ev := <-late.ch; !errors.Is(ev.Err, store.ErrClosed) {
		t.Fatalf("watch armed after close got %+v, want not-watching ErrClosed at once", ev)
	}
	if r.count() != 0 {
		t.Fatalf("%d watches left after close", r.count())
	}
}

func TestHostProviderFirstRoundAfterAConnectionIsFree(t *testing.T) {
	for _, n := range []int{1, 3} {
		servers := make([]string, n)
		for i := range servers {
			servers[i] = fmt.Sprintf("zk%d:2181", i)
		}
		hp := &hostProvider{}
		if err := hp.Init(servers); err != nil {
			t.Fatal(err)
		}
		var starts []int
		for i := 1; i <= 3*n; i++ {
			addr, retry := hp.Next()
			if addr != servers[(i-1)%n] {
				t.Fatalf("n=%d attempt %d: %s, want round robin", n, i, addr)
			}
			if retry {
				starts = append(starts, i)
			}
		}
		want := []int{n + 1, 2*n + 1}
		if fmt.Sprint(starts) != fmt.Sprint(want) {
			t.Fatalf("n=%d: retryStart at attempts %v, want %v", n, starts, want)
		}
		hp.Connected()
		if _, retry := hp.Next(); retry {
			t.Fatalf("n=%d: first attempt after a connection paused", n)
		}
	}
}

func TestSniffConnReadsTheNegotiatedTimeoutFromTheHandshake(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	d := newDialer(time.Second, time.Second)
	defer d.retire()
	sc := &sniffConn{Conn: client, d: d, addr: "zk:2181"}
	d.conns[sc] = struct{}{}

	// ConnectResponse: len, protocolVersion, timeOut, sessionId, passwd.
	passwd := make([]byte, 16)
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+4+8+4+len(passwd)))
	frame = binary.BigEndian.AppendUint32(frame, 0)
	frame = binary.BigEndian.AppendUint32(frame, 4000)
	frame = binary.BigEndian.AppendUint64(frame, 0x1234)
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(passwd)))
	frame = append(frame, passwd...)
	go func() {
		for i := 0; i < len(frame); i += 3 { // arrive in small pieces
			_, _ = server.Write(frame[i:min(i+3, len(frame))])
		}
		_ = server.Close()
	}()
	buf := make([]byte, 5)
	var got []byte
	for {
		n, err := sc.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != string(frame) {
		t.Fatal("sniffConn altered the stream")
	}
	if d.timeoutMs.Load() != 4000 || d.sessionID.Load() != 0x1234 {
		t.Fatalf("sniffed timeout %d ms, session 0x%x; want 4000, 0x1234", d.timeoutMs.Load(), d.sessionID.Load())
	}
	if d.describe([]string{"zk:2181"}) != "zk:2181 (connected)" {
		t.Fatalf("describe after a handshake: %q", d.describe([]string{"zk:2181"}))
	}
}

func TestFirstFailureIsTheCulpritNotTheRolledBackOps(t *testing.T) {
	rolledBack := fmt.Errorf("unknown error: %v", zk.ErrCode(-2))
	res := []zk.MultiResponse{{}, {}, {Error: zk.ErrBadVersion}, {Error: rolledBack}, {Error: rolledBack}}
	if i := firstFailure(res); i != 2 {
		t.Fatalf("firstFailure = %d, want 2", i)
	}
	if !isRollback(rolledBack) || isRollback(zk.ErrBadVersion) {
		t.Fatal("isRollback does not recognise ZooKeeper's rollback marker")
	}
	if i := firstFailure([]zk.MultiResponse{{}, {}}); i != -1 {
		t.Fatalf("firstFailure of an all-OK reply = %d, want -1", i)
	}
}

// TestSniffConnBoundsTheHandshakeWait: a connection that is accepted but
// never answered ends after the handshake timeout instead of the client's 10
// receive timeouts; once the ConnectResponse is read, the client's deadlines
// apply unchanged. On synctest's fake clock, so no real time passes.
func TestSniffConnBoundsTheHandshakeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		d := newDialer(time.Second, 3*time.Second)
		defer d.retire()
		sc := &sniffConn{Conn: client, d: d, addr: "zk:2181"}
		d.conns[sc] = struct{}{}

		start := time.Now()
		if err := sc.SetReadDeadline(start.Add(time.Hour)); err != nil { // the client's own deadline
			t.Fatal(err)
		}
		if _, err := sc.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of an unanswered handshake: %v, want a deadline error", err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Fatalf("unanswered handshake read ended after %v, want the 3s handshake timeout", waited)
		}

		// The server answers: then a deadline-free read waits as long as the
		// client wants.
		if err := sc.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = server.Write(make([]byte, 20)) }()
		if _, err := io.ReadFull(sc, make([]byte, 20)); err != nil {
			t.Fatalf("handshake read: %v", err)
		}
		if err := sc.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			_, err := sc.Read(make([]byte, 1))
			read <- err
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-read:
			t.Fatalf("read after the handshake ended with %v before any data or deadline", err)
		default:
		}
		go func() { _, _ = server.Write([]byte{1}) }()
		if err := <-read; err != nil {
			t.Fatalf("read after the handshake: %v", err)
		}
	})
}

package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer accepts connections and echoes lines until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() { _, _ = io.Copy(c, c) }() // ends when the conn is closed below
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func roundTrip(conn net.Conn, msg string, timeout time.Duration) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, msg+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// Forwarding; a cut that drops the live connection and leaves a new one
// hanging (a partition, not a refusal); a restore after which the held
// connection and a new one go through.
func TestProxyCutAndRestore(t *testing.T) {
	p := New(t, echoServer(t))
	live, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if got, err := roundTrip(live, "hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("through proxy: %q, %v", got, err)
	}

	p.Cut()
	if _, err := roundTrip(live, "again", 5*time.Second); err == nil {
		t.Fatal("live connection still works after Cut")
	}
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during cut: %v (want accepted, then silence)", err)
	}
	defer held.Close()
	var ne net.Error
	if _, err := roundTrip(held, "lost", 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("connection made during cut: %v; want a timeout (a partition hangs)", err)
	}

	p.Restore()
	// The connection held during the cut goes through now, with what was
	// sent on it meanwhile (a healed partition delivers it): the first line
	// echoed is the one sent during the cut.
	if got, err := roundTrip(held, "healed", 5*time.Second); err != nil || got != "lost" {
		t.Fatalf("held connection after Restore: %q, %v; want the echo of what was sent during the cut", got, err)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := roundTrip(fresh, "back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

// A ZooKeeper client behind a cut proxy loses its connection; after Restore it
// reconnects to the same session when the cut was shorter than the session
// timeout.

// TapReplies sees the first bytes the target sends on a connection, and
// the client still gets every byte, in order.
func TestTapReplies(t *testing.T) {
	p := New(t, echoServer(t))
	tapped := make(chan string, 1)
	p.TapReplies(5, func(b []byte) { tapped <- string(b) })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hello world\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello world\n" {
		t.Fatalf("read %q, %v; want the whole echo", line, err)
	}
	if got := <-tapped; got != "hello" {
		t.Fatalf("tapped %q, want %q", got, "hello")
	}
}

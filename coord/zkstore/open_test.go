package zkstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/zkstore"
)

func TestOpenUnreachableFailsWithinConnectTimeoutNamingEveryAddress(t *testing.T) {
	const connectTimeout = time.Second
	servers := []string{"127.0.0.1:1", "127.0.0.1:2"}
	start := time.Now()
	s, err := zkstore.Open(context.Background(), zkstore.Config{
		Servers:        servers,
		ConnectTimeout: connectTimeout,
		Logger:         testLogger(),
	})
	elapsed := time.Since(start)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open on unreachable addresses succeeded")
	}
	if !errors.Is(err, zkstore.ErrUnreachable) {
		t.Fatalf("Open error %v, want ErrUnreachable", err)
	}
	for _, a := range servers {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("error %q does not name %s", err, a)
		}
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %q does not say why the addresses failed", err)
	}
	// Bounded: ConnectTimeout plus Close of a client that never connected.
	if elapsed < connectTimeout || elapsed > connectTimeout+2*time.Second {
		t.Fatalf("Open took %v, want about ConnectTimeout %v", elapsed, connectTimeout)
	}
	t.Logf("Open failed after %v: %v", elapsed, err)
}

func TestOpenHonoursTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{"127.0.0.1:1"}, Logger: testLogger()})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open error %v, want context.DeadlineExceeded naming 127.0.0.1:1", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Open returned after %v, want soon after the context's 300ms", d)
	}
}

func TestOpenRejectsInvalidConfigNamingTheField(t *testing.T) {
	tests := []struct {
		name  string
		cfg   zkstore.Config
		field string
	}{
		{"no servers", zkstore.Config{}, "Servers"},
		{"no port", zkstore.Config{Servers: []string{"zk1"}}, "Servers[0]"},
		{"bad port", zkstore.Config{Servers: []string{"zk1:2181", "zk2:99999"}}, "Servers[1]"},
		{"negative session timeout", zkstore.Config{Servers: []string{"zk1:2181"}, SessionTimeout: -time.Second}, "SessionTimeout"},
		{"negative connect timeout", zkstore.Config{Servers: []string{"zk1:2181"}, ConnectTimeout: -time.Second}, "ConnectTimeout"},
		{"relative root", zkstore.Config{Servers: []string{"zk1:2181"}, Root: "jobs"}, "Root"},
		{"root with trailing slash", zkstore.Config{Servers: []string{"zk1:2181"}, Root: "/jobs/"}, "Root"},
		{"auth without colon", zkstore.Config{Servers: []string{"zk1:2181"}, Auth: "alice"}, "Auth"},
		{"auth without user", zkstore.Config{Servers: []string{"zk1:2181"}, Auth: ":secret"}, "Auth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := zkstore.Open(context.Background(), tt.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open accepted an invalid config")
			}
			if !errors.Is(err, zkstore.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %v, want ErrInvalidConfig naming %s", err, tt.field)
			}
		})
	}
}

package integration

import (
	"testing"

	"github.com/shardflow/shardflow/internal/faultproxy"
)

// Proxy is an in-process TCP proxy on 127.0.0.1 in front of one target
// address, able to cut the path like a network partition (package
// internal/faultproxy, shared with the protocol suite).
type Proxy = faultproxy.Proxy

// NewProxy starts a proxy to target (host:port) on a free port of 127.0.0.1.
// Its goroutines are stopped and waited for in t.Cleanup, or by Close.
func NewProxy(t testing.TB, target string) *Proxy { return faultproxy.New(t, target) }

package main

import (
	"bytes"
	"fmt"
	"regexp"
)

// rule is one exact rewrite of go-zookeeper's conn.go: old must occur exactly
// want times, so that an upgraded client whose code moved fails the build
// instead of silently keeping the race.
type rule struct {
	old, new string
	want     int
}

// rules make every access to Conn.lastZxid atomic. The race (upstream
// go-zookeeper/zk#35): on a reconnect the loop goroutine reads lastZxid in
// sendSetWatches while the new connection's recvLoop writes it from a reply.
// The two accesses in authenticate are made atomic too, so that no plain
// access is left beside the atomic ones.
var rules = []rule{
	{ // sendSetWatches, the racing read
		old:  "RelativeZxid: c.lastZxid,",
		new:  "RelativeZxid: atomic.LoadInt64(&c.lastZxid),",
		want: 1,
	},
	{ // recvLoop, the racing write
		old:  "c.lastZxid = res.Zxid",
		new:  "atomic.StoreInt64(&c.lastZxid, res.Zxid)",
		want: 1,
	},
	{ // authenticate, the handshake's read
		old:  "LastZxidSeen:    c.lastZxid,",
		new:  "LastZxidSeen:    atomic.LoadInt64(&c.lastZxid),",
		want: 1,
	},
	{ // authenticate, reset on an expired session
		old:  "c.lastZxid = 0",
		new:  "atomic.StoreInt64(&c.lastZxid, 0)",
		want: 1,
	},
}

// prerequisites are what makes the rewrite valid: lastZxid is an int64 and
// the first field of Conn (64-bit atomics need 8-byte alignment on 32-bit
// platforms, which the first word of an allocated struct has), and conn.go
// already imports sync/atomic.
var prerequisites = []struct {
	what string
	re   *regexp.Regexp
}{
	{"lastZxid int64 as the first field of Conn", regexp.MustCompile(`(?m)^type Conn struct \{\n\tlastZxid\s+int64\n`)},
	{`the import of "sync/atomic"`, regexp.MustCompile(`(?m)^\s*"sync/atomic"$`)},
}

// plainAccess finds an access to lastZxid that is not through &c.lastZxid.
var plainAccess = regexp.MustCompile(`[^&]c\.lastZxid\b`)

// Patch returns conn.go with every access to Conn.lastZxid made atomic, or
// an error naming the first expectation the source does not meet. The result
// has the same lines as src, so race reports and stack traces keep their
// line numbers.
func Patch(src []byte) ([]byte, error) {
	for _, p := range prerequisites {
		if !p.re.Match(src) {
			return nil, fmt.Errorf("expected %s", p.what)
		}
	}
	out := src
	for _, r := range rules {
		if n := bytes.Count(out, []byte(r.old)); n != r.want {
			return nil, fmt.Errorf("expected %q exactly %d time(s), found it %d time(s)", r.old, r.want, n)
		}
		out = bytes.ReplaceAll(out, []byte(r.old), []byte(r.new))
	}
	if loc := plainAccess.FindIndex(out); loc != nil {
		line := bytes.Count(out[:loc[0]], []byte("\n")) + 1
		return nil, fmt.Errorf("expected no access to c.lastZxid besides the %d rewritten ones, found another at line %d", len(rules), line)
	}
	return out, nil
}

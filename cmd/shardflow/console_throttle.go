package main

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Login throttling: after loginFailureLimit failed authentications from
// one client address within loginFailureWindow, every attempt from it
// (right or wrong) is refused with 429 until the window since its first
// failure has passed. Guessing a 12-character password at 5 tries a
// minute is hopeless; an operator who mistyped waits a minute.
const (
	loginFailureLimit  = 5
	loginFailureWindow = time.Minute
	// maxThrottled bounds the addresses remembered; beyond it the oldest
	// windows are forgotten first (an attacker with that many addresses
	// gains little: each still gets 5 tries a minute).
	maxThrottled = 10_000
)

// throttle counts failed authentications per client address.
type throttle struct {
	mu  sync.Mutex
	now func() time.Time
	by  map[string]*failures
}

type failures struct {
	count int
	since time.Time
}

func newThrottle() *throttle { return &throttle{now: time.Now, by: map[string]*failures{}} }

// clientAddr is the address throttling counts by: the peer's IP.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// blocked reports whether addr is throttled now, and for how long.
func (t *throttle) blocked(addr string) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.by[addr]
	if !ok {
		return false, 0
	}
	left := f.since.Add(loginFailureWindow).Sub(t.now())
	if left <= 0 {
		delete(t.by, addr)
		return false, 0
	}
	return f.count >= loginFailureLimit, left
}

// fail records a failed authentication from addr.
func (t *throttle) fail(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	f, ok := t.by[addr]
	if !ok || now.Sub(f.since) >= loginFailureWindow {
		if len(t.by) >= maxThrottled {
			t.forgetOldest()
		}
		f = &failures{since: now}
		t.by[addr] = f
	}
	f.count++
}

// forgetOldest drops the windows that have passed, or else the oldest.
func (t *throttle) forgetOldest() {
	now := t.now()
	var oldest string
	for a, f := range t.by {
		if now.Sub(f.since) >= loginFailureWindow {
			delete(t.by, a)
		} else if oldest == "" || f.since.Before(t.by[oldest].since) {
			oldest = a
		}
	}
	if len(t.by) >= maxThrottled && oldest != "" {
		delete(t.by, oldest)
	}
}

// refuse writes the 429 for a throttled client.
func refuseThrottled(w http.ResponseWriter, left time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(left/time.Second)+1))
	http.Error(w, "console: too many failed logins from your address; wait a minute and try again", http.StatusTooManyRequests)
}

package main

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestLoginThrottled: after 5 wrong logins from one address, even the
// right password is refused with 429 until the window passes; another
// address is unaffected; wrong bearer tokens count too.
func TestLoginThrottled(t *testing.T) {
	h, cs, _ := consoleServerFixture(t, testCreds(t), nil)
	now := time.Now()
	cs.throttle.now = func() time.Time { return now }
	login := func(pass, addr string) int {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"user": {"alice"}, "password": {pass}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range loginFailureLimit {
		if code := login("wrong-password", "10.0.0.7:5000"); code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d", i, code)
		}
	}
	if code := login("secret-password", "10.0.0.7:5001"); code != http.StatusTooManyRequests {
		t.Errorf("right login after %d failures: %d, want 429", loginFailureLimit, code)
	}
	if code := login("secret-password", "10.0.0.8:5000"); code != http.StatusSeeOther {
		t.Errorf("login from another address: %d, want 303", code)
	}
	rec := post(h, "/api/jobs/console-job/trigger", nil, map[string]string{"Authorization": "Bearer " + testToken})
	if rec.Code != http.StatusTooManyRequests && rec.Code != http.StatusNoContent {
		t.Errorf("token from httptest's address: %d", rec.Code)
	}
	now = now.Add(loginFailureWindow)
	if code := login("secret-password", "10.0.0.7:5002"); code != http.StatusSeeOther {
		t.Errorf("login after the window: %d, want 303", code)
	}
	for range loginFailureLimit {
		post(h, "/api/jobs/console-job/pause", nil, map[string]string{"Authorization": "Bearer wrong-token-0123456789"})
	}
	if rec := post(h, "/api/jobs/console-job/pause", nil, map[string]string{"Authorization": "Bearer " + testToken}); rec.Code != http.StatusTooManyRequests {
		t.Errorf("right token after %d wrong ones: %d, want 429", loginFailureLimit, rec.Code)
	}
}

func TestMinimumPasswordLength(t *testing.T) {
	t.Setenv(envConsoleToken, "")
	t.Setenv(envConsoleBasicAuth, "alice:short-pass")
	if _, err := loadCredentials("", ""); err == nil || !strings.Contains(err.Error(), "at least 12") {
		t.Errorf("a 10-character password: %v, want refused naming 12", err)
	}
	t.Setenv(envConsoleBasicAuth, "alice:long-enough-pass")
	if _, err := loadCredentials("", ""); err != nil {
		t.Errorf("a long password: %v", err)
	}
}

// TestSessionCookieSecure: the cookie is Secure over TLS and behind a
// trusted proxy saying https, not when an untrusted client says so.
func TestSessionCookieSecure(t *testing.T) {
	h, cs, _ := consoleServerFixture(t, testCreds(t), nil)
	var err error
	if cs.trustedProxies, err = parseTrustedProxies([]string{"10.1.0.0/16", "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr   string
		proto  string
		secure bool
	}{
		{"10.1.2.3:4000", "https", true},
		{"192.0.2.1:4000", "https", true},
		{"10.2.0.1:4000", "https", false},
		{"10.1.2.3:4000", "", false},
	} {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.RemoteAddr = tt.addr
		if tt.proto != "" {
			req.Header.Set("X-Forwarded-Proto", tt.proto)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		cookies := rec.Result().Cookies()
		if len(cookies) != 1 || cookies[0].Secure != tt.secure {
			t.Errorf("from %s proto %q: cookies %v, want Secure=%v", tt.addr, tt.proto, cookies, tt.secure)
		}
	}
	if _, err := parseTrustedProxies([]string{"not-an-ip"}); err == nil {
		t.Error("a bad --trusted-proxy was accepted")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/jobs/a?x=1":          "/jobs/a?x=1",
		"/":                    "/",
		"//evil.example":       "/",
		"/\t/evil.example":     "/",
		"/\\evil.example":      "/",
		"\\/evil.example":      "/",
		"https://evil.example": "/",
		"javascript:alert(1)":  "/",
		"/%0a/x":               "/%0a/x",
		"/\x7f":                "/",
		"":                     "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDoneMessagesFixed: ?done= shows only the console's own messages;
// any other text (a phishing line in a link) shows nothing.
func TestDoneMessagesFixed(t *testing.T) {
	h, _ := consoleFixture(t, nil, nil)
	for path, want := range map[string]string{
		"/?done=" + url.QueryEscape("Your session expired: log in at https://evil.example"): "",
		"/jobs/console-job?done=pause": "paused",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body := rec.Body.String()
		if strings.Contains(body, "evil.example") {
			t.Errorf("GET %s shows the link's text", path)
		}
		if want != "" && !strings.Contains(body, `<p class="msg">`+want+`</p>`) {
			t.Errorf("GET %s lacks the message %q", path, want)
		}
	}
}

// TestStrictCSP: no script at all, and only the layout's style by its
// hash, which matches the style the pages carry.
func TestStrictCSP(t *testing.T) {
	h, _ := consoleFixture(t, testCreds(t), nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/jobs/console-job", nil))
	csp := rec.Header().Get("Content-Security-Policy")
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q allows more than it should", csp)
	}
	body := rec.Body.String()
	start, end := strings.Index(body, "<style>")+len("<style>"), strings.Index(body, "</style>")
	sum := sha256.Sum256([]byte(body[start:end]))
	if !strings.Contains(csp, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") {
		t.Errorf("CSP %q does not allow the page's own style", csp)
	}
	if strings.Contains(body, "onsubmit") || strings.Contains(body, "<script") {
		t.Error("a page carries script")
	}
}

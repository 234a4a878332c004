package main

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/dataflow"
)

type nopJob struct{}

func (nopJob) Fetch(context.Context, dataflow.Shard) ([]int, error) { return nil, nil }
func (nopJob) Process(context.Context, dataflow.Shard, int) error   { return nil }

const testToken = "0123456789abcdef-test-token"

// consoleFixture runs one Node ("w1") with job "console-job" (3 items) on a
// memstore server and returns the console over another session of the same
// tree, with a bearer token and basic auth alice:secret-password configured (creds
// nil: read-only).
func consoleFixture(t *testing.T, creds *credentials, history HistorySection) (http.Handler, *coord.Admin) {
	t.Helper()
	h, _, admin := consoleServerFixture(t, creds, history)
	return h, admin
}

// consoleServerFixture is consoleFixture that also returns the server.
func consoleServerFixture(t *testing.T, creds *credentials, history HistorySection) (http.Handler, *consoleServer, *coord.Admin) {
	t.Helper()
	srv := memstore.NewServer()
	adminSession := srv.Connect()
	t.Cleanup(func() { _ = adminSession.Close() })
	startNode(t, srv, protocol.DefaultNamespace, "console-job", 3)
	admin := coord.NewAdmin(adminSession, "")
	// httptest's requests name example.com in Host.
	cs, h := buildConsole(consoleOptions{admin: admin, namespace: protocol.DefaultNamespace, creds: creds, history: history, logger: cli.Logger,
		allowedHosts: []string{"example.com"}})
	return h, cs, admin
}

func testCreds(t *testing.T) *credentials {
	t.Helper()
	t.Setenv(envConsoleToken, testToken)
	t.Setenv(envConsoleBasicAuth, "alice:secret-password")
	c, err := loadCredentials("", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// post sends a same-origin form POST (as a browser on the console's own
// page does) with the given header modifications.
func post(h http.Handler, path string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func get(h http.Handler, path string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func bearer() map[string]string { return map[string]string{"Authorization": "Bearer " + testToken} }

func mustStatus(t *testing.T, admin *coord.Admin) coord.JobStatus {
	t.Helper()
	st, err := admin.Status(context.Background(), "console-job")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestConsoleAuthAndCrossOrigin(t *testing.T) {
	h, admin := consoleFixture(t, testCreds(t), nil)
	pause := url.Values{"action": {"pause"}}
	if rec := post(h, "/jobs/console-job/act", pause, nil); rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("unauthenticated POST: %d %q, want 401 with WWW-Authenticate", rec.Code, rec.Body)
	}
	wrong := map[string]string{"Authorization": "Bearer not-the-token-at-all"}
	if rec := post(h, "/jobs/console-job/act", pause, wrong); rec.Code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d, want 401", rec.Code)
	}
	// A cross-site page posting with valid credentials is refused too.
	for _, hdr := range []map[string]string{
		{"Authorization": "Bearer " + testToken, "Sec-Fetch-Site": "cross-site"},
		{"Authorization": "Bearer " + testToken, "Sec-Fetch-Site": "same-site"},
		{"Authorization": "Bearer " + testToken, "Sec-Fetch-Site": "", "Origin": "https://evil.example"},
	} {
		if rec := post(h, "/api/jobs/console-job/pause", nil, hdr); rec.Code != http.StatusForbidden {
			t.Fatalf("cross-origin POST %v: %d %q, want 403", hdr, rec.Code, rec.Body)
		}
	}
	for _, s := range mustStatus(t, admin).Servers {
		if s.Paused {
			t.Fatal("a refused request paused the job")
		}
	}
	rec := post(h, "/jobs/console-job/act", pause, bearer())
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "/jobs/console-job") {
		t.Fatalf("pause with a token: %d %v", rec.Code, rec.Header())
	}
	st := mustStatus(t, admin)
	if !st.Servers[0].Paused {
		t.Fatal("job not paused after an authenticated pause")
	}
	if a := st.Actions[0]; a.Action != "pause" || !strings.HasPrefix(a.Actor, "console:token from ") {
		t.Fatalf("audit entry %+v, want pause by console:token", a)
	}
	// Basic auth, then a browser login with a session cookie.
	req := map[string]string{"Authorization": "Basic " + basic("alice", "secret-password")}
	if rec := post(h, "/api/jobs/console-job/resume", nil, req); rec.Code != http.StatusNoContent {
		t.Fatalf("resume with basic auth: %d %q", rec.Code, rec.Body)
	}
	if rec := post(h, "/api/jobs/console-job/resume", nil, map[string]string{"Authorization": "Basic " + basic("alice", "nope")}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d, want 401", rec.Code)
	}
	rec = post(h, "/login", url.Values{"user": {"alice"}, "password": {"secret-password"}, "next": {"/jobs/console-job"}}, nil)
	cookie := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookie) != 1 || !cookie[0].HttpOnly || cookie[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookies %+v", rec.Code, cookie)
	}
	rec = post(h, "/jobs/console-job/act", url.Values{"action": {"trigger"}}, map[string]string{"Cookie": cookie[0].Name + "=" + cookie[0].Value})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("trigger with the session cookie: %d %q", rec.Code, rec.Body)
	}
	if a := mustStatus(t, admin).Actions[0]; a.Action != "trigger" || !strings.HasPrefix(a.Actor, "console:alice from ") {
		t.Fatalf("audit entry %+v, want trigger by console:alice", a)
	}
	if rec := post(h, "/login", url.Values{"token": {"guess"}}, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("login with a wrong token: %d, want 401", rec.Code)
	}
}

func basic(user, pass string) string {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func TestConsoleReadOnlyWithoutCredentials(t *testing.T) {
	h, admin := consoleFixture(t, nil, nil)
	rec := get(h, "/jobs/console-job", nil)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `data-op="pause`) || !strings.Contains(rec.Body.String(), "Read-only console") {
		t.Fatalf("read-only job page: %d, offers actions or lacks the read-only note:\n%s", rec.Code, rec.Body)
	}
	if rec := post(h, "/jobs/console-job/act", url.Values{"action": {"pause"}}, bearer()); rec.Code != http.StatusForbidden {
		t.Fatalf("POST on a read-only console: %d, want 403", rec.Code)
	}
	if mustStatus(t, admin).Servers[0].Paused {
		t.Fatal("read-only console paused the job")
	}
}

func TestConsolePagesOfferActionsWhereTheyApply(t *testing.T) {
	h, admin := consoleFixture(t, testCreds(t), nil)
	page := func() string {
		t.Helper()
		rec := get(h, "/jobs/console-job", bearer())
		if rec.Code != http.StatusOK {
			t.Fatalf("job page: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	body := page()
	for _, want := range []string{`data-op="pause"`, `data-op="pause:w1"`, `data-op="trigger"`, `data-op="disable:item2"`,
		`data-op="config:fetchDataCount"`, `data-op="shutdown:w1"`, `name="confirm" value="yes" required`, " UTC", "servers"} {
		if !strings.Contains(body, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	for _, unwanted := range []string{`data-op="resume`, `data-op="remove`, `data-op="enable`} {
		if strings.Contains(body, unwanted) {
			t.Errorf("job page offers %q, which does not apply", unwanted)
		}
	}
	if err := admin.Pause(context.Background(), "console-job", ""); err != nil {
		t.Fatal(err)
	}
	if err := admin.DisableItem(context.Background(), "console-job", 2); err != nil {
		t.Fatal(err)
	}
	body = page()
	for _, want := range []string{`data-op="resume"`, `data-op="resume:w1"`, `data-op="enable:item2"`, "paused"} {
		if !strings.Contains(body, want) {
			t.Errorf("paused job page lacks %q", want)
		}
	}
	if strings.Contains(body, `data-op="pause"`) {
		t.Error("paused job page still offers pause all")
	}
	// A refused edit re-renders the page with the error naming the field.
	rec := post(h, "/jobs/console-job/act", url.Values{"action": {"config"}, "field": {"fetchDataCount"}, "value": {"0"}}, bearer())
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "fetchDataCount") || !strings.Contains(rec.Body.String(), `id="error"`) {
		t.Fatalf("config set fetchDataCount 0: %d\n%s", rec.Code, rec.Body)
	}
	rec = post(h, "/jobs/console-job/act", url.Values{"action": {"disable"}, "item": {"99"}}, bearer())
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "0..2") {
		t.Fatalf("disable item 99: %d\n%s", rec.Code, rec.Body)
	}
	// The overview: health (coord's, with why), counts and next fire.
	rec = get(h, "/", nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `href="/jobs/console-job"`) ||
		!strings.Contains(rec.Body.String(), `data-health="degraded" title="paused on every online server">degraded<`) {
		t.Fatalf("overview: %d\n%s", rec.Code, rec.Body)
	}
	var doc statusDocument
	if err := json.Unmarshal(get(h, "/api/status", nil).Body.Bytes(), &doc); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("/api/status: %v %+v", err, doc)
	}
}

func TestConsoleHistorySection(t *testing.T) {
	h, _ := consoleFixture(t, nil, func(_ context.Context, job string) (template.HTML, error) {
		return template.HTML(`<p id="hist">runs of ` + template.HTMLEscapeString(job) + `</p>`), nil
	})
	if body := get(h, "/jobs/console-job", nil).Body.String(); !strings.Contains(body, `<p id="hist">runs of console-job</p>`) {
		t.Fatalf("history section missing:\n%s", body)
	}
	h2, _ := consoleFixture(t, nil, nil)
	if body := get(h2, "/jobs/console-job", nil).Body.String(); strings.Contains(body, "<h2>History</h2>") {
		t.Fatal("a console without history renders a history section")
	}
}

func TestConsoleRefusesToListenOpenly(t *testing.T) {
	none := &credentials{}
	for _, tc := range []struct {
		addr  string
		creds *credentials
		ok    bool
	}{
		{"127.0.0.1:8899", none, true},
		{"[::1]:8899", none, true},
		{"localhost:8899", none, true},
		{"0.0.0.0:8899", none, false},
		{":8899", none, false},
		{"10.1.2.3:8899", none, false},
		{"0.0.0.0:8899", &credentials{token: digest("x")}, true},
	} {
		err := requireLoopbackOrAuth(tc.addr, tc.creds)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "without credentials")) {
			t.Errorf("requireLoopbackOrAuth(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
	t.Setenv(envConsoleToken, "")
	t.Setenv(envConsoleBasicAuth, "")
	_, errOut, code := runCLI(t, "console", "--zk", "zk:1", "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(errOut, "refusing to listen on 0.0.0.0:0, which is not a loopback address, without credentials") || !strings.Contains(errOut, "--token-file") {
		t.Fatalf("console on 0.0.0.0 without auth: exit %d %q", code, errOut)
	}
	t.Setenv(envConsoleToken, "short")
	if _, errOut, code := runCLI(t, "console", "--zk", "zk:1"); code != 2 || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("short token: exit %d %q", code, errOut)
	}
}

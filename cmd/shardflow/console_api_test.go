package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/history"
)

// apiFixture serves the real console handler over HTTP (httptest), with
// servers w1 and w2 of job "api-job" (4 items) on a memstore tree, creds
// (nil: read-only) and a history reader (nil: none).
func apiFixture(t *testing.T, creds *credentials, hist history.Reader) (*httptest.Server, *coord.Admin) {
	t.Helper()
	srv := memstore.NewServer()
	sess := srv.Connect()
	t.Cleanup(func() { _ = sess.Close() })
	startNodeAs(t, srv, "w1", "api-job", 4)
	startNodeAs(t, srv, "w2", "api-job", 4)
	admin := coord.NewAdmin(sess, "")
	ts := httptest.NewServer(newConsole(consoleOptions{admin: admin, namespace: protocol.DefaultNamespace, creds: creds,
		historyReader: hist, logger: cli.Logger}))
	t.Cleanup(ts.Close)
	return ts, admin
}

// apiCall sends one request (body JSON when not "") and decodes the JSON
// reply into out (nil: not decoded); it returns the status code.
func apiCall(t *testing.T, ts *httptest.Server, method, path, body string, hdr map[string]string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, body %q; want JSON", method, path, ct, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// wantAPIError checks a reply is the JSON error with code and field.
func wantAPIError(t *testing.T, ts *httptest.Server, method, path, body string, hdr map[string]string, code int, field string) apiError {
	t.Helper()
	var e apiError
	got := apiCall(t, ts, method, path, body, hdr, &e)
	if got != code || e.Status != code || e.Field != field || e.Error == "" {
		t.Fatalf("%s %s %s: %d %+v; want %d naming field %q", method, path, body, got, e, code, field)
	}
	return e
}

func TestAPIReads(t *testing.T) {
	ts, _ := apiFixture(t, nil, nil)
	var list apiJobList
	if code := apiCall(t, ts, "GET", "/api/v1/jobs", "", nil, &list); code != 200 {
		t.Fatalf("GET /api/v1/jobs: %d", code)
	}
	if list.Namespace != "shardflow" || len(list.Jobs) != 1 || list.Jobs[0].Job != "api-job" || list.Jobs[0].Health == "" ||
		list.Jobs[0].Servers != 2 || list.Jobs[0].LiveServers != 2 || list.Unreadable == nil {
		t.Fatalf("GET /api/v1/jobs = %+v", list)
	}
	var js coord.JobStatus
	if code := apiCall(t, ts, "GET", "/api/v1/jobs/api-job", "", nil, &js); code != 200 || js.Job != "api-job" || len(js.Items) != 4 || len(js.Servers) != 2 {
		t.Fatalf("GET /api/v1/jobs/api-job: %d %+v", code, js)
	}
	if js.Health != list.Jobs[0].Health {
		t.Fatalf("health %q in the job, %q in the list", js.Health, list.Jobs[0].Health)
	}
	wantAPIError(t, ts, "GET", "/api/v1/jobs/nope", "", nil, 404, "job")
	wantAPIError(t, ts, "GET", "/api/v1/nothing", "", nil, 404, "path")
	wantAPIError(t, ts, "GET", "/api/v1/jobs/api-job/history", "", nil, 404, "history")
}

func TestAPIHistory(t *testing.T) {
	mem := history.NewMemory(0)
	now := time.Now()
	for i := range 6 {
		mem.Record(history.Record{Job: "api-job", Server: "w1", Item: i % 2, Epoch: 1, Source: history.SourceNormal,
			Begin: now.Add(time.Duration(i-10) * time.Minute), End: now.Add(time.Duration(i-10)*time.Minute + time.Second), Success: 10})
	}
	mem.Record(history.Record{Job: "other", Server: "w9", Source: history.SourceManual, Begin: now, End: now})
	ts, _ := apiFixture(t, nil, mem)
	var page apiHistoryPage
	if code := apiCall(t, ts, "GET", "/api/v1/jobs/api-job/history", "", nil, &page); code != 200 || page.Job != "api-job" || len(page.Runs) != 6 {
		t.Fatalf("history: %d %+v", code, page)
	}
	for i, r := range page.Runs {
		if r.Job != "api-job" || (i > 0 && r.Begin.After(page.Runs[i-1].Begin)) {
			t.Fatalf("runs not the job's, newest first: %+v", page.Runs)
		}
	}
	if code := apiCall(t, ts, "GET", "/api/v1/jobs/api-job/history?item=1&limit=2", "", nil, &page); code != 200 || len(page.Runs) != 2 || page.Runs[0].Item != 1 || page.Runs[1].Item != 1 {
		t.Fatalf("history?item=1&limit=2: %d %+v", code, page.Runs)
	}
	wantAPIError(t, ts, "GET", "/api/v1/jobs/api-job/history?item=x", "", nil, 400, "item")
	wantAPIError(t, ts, "GET", "/api/v1/jobs/api-job/history?limit=0", "", nil, 400, "limit")
	wantAPIError(t, ts, "GET", "/api/v1/jobs/api-job/history?since=-1h", "", nil, 400, "since")
	wantAPIError(t, ts, "GET", "/api/v1/jobs/api-job/history?itme=1", "", nil, 400, "itme")
	wantAPIError(t, ts, "GET", "/api/v1/jobs/nope/history", "", nil, 404, "job")
}

func TestAPIActionsNeedAuthAndSameOrigin(t *testing.T) {
	ro, _ := apiFixture(t, nil, nil)
	wantAPIError(t, ro, "POST", "/api/v1/jobs/api-job/actions", `{"action":"pause"}`, bearer(), 403, "Authorization")

	ts, admin := apiFixture(t, testCreds(t), nil)
	wantAPIError(t, ts, "POST", "/api/v1/jobs/api-job/actions", `{"action":"pause"}`, nil, 401, "Authorization")
	wantAPIError(t, ts, "POST", "/api/v1/jobs/api-job/actions", `{"action":"pause"}`,
		map[string]string{"Authorization": "Bearer not-the-token-at-all"}, 401, "Authorization")
	for _, hdr := range []map[string]string{
		{"Authorization": "Bearer " + testToken, "Sec-Fetch-Site": "cross-site"},
		{"Authorization": "Bearer " + testToken, "Origin": "https://evil.example"},
	} {
		wantAPIError(t, ts, "POST", "/api/v1/jobs/api-job/actions", `{"action":"pause"}`, hdr, 403, "Origin")
	}
	st, err := admin.Status(t.Context(), "api-job")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Servers {
		if s.Paused {
			t.Fatal("a refused request paused a server")
		}
	}
	if len(st.Actions) != 0 {
		t.Fatalf("refused requests were audited: %+v", st.Actions)
	}
}

func TestAPIActions(t *testing.T) {
	ts, admin := apiFixture(t, testCreds(t), nil)
	path := "/api/v1/jobs/api-job/actions"
	tok := bearer()
	var res apiActionResult
	if code := apiCall(t, ts, "POST", path, `{"action":"pause","server":"w1"}`, tok, &res); code != 200 ||
		res.Action != "pause" || res.Server != "w1" || !strings.HasPrefix(res.Actor, "console:token from ") {
		t.Fatalf("pause w1: %d %+v", code, res)
	}
	st, err := admin.Status(t.Context(), "api-job")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Servers {
		if s.Paused != (s.ID == "w1") {
			t.Fatalf("after pause w1: server %s paused=%v", s.ID, s.Paused)
		}
	}
	if a := st.Actions[0]; a.Action != "pause" || a.Server != "w1" || !strings.HasPrefix(a.Actor, "console:token from ") {
		t.Fatalf("audit %+v, want the API's pause of w1 by console:token", a)
	}
	alice := map[string]string{"Authorization": "Basic " + basicAuth("alice", "secret-password")}
	res = apiActionResult{}
	if code := apiCall(t, ts, "POST", path, `{"action":"trigger"}`, alice, &res); code != 200 || len(res.Servers) != 1 || res.Servers[0] != "w2" {
		t.Fatalf("trigger with w1 paused: %d %+v; want w2 asked", code, res)
	}
	if code := apiCall(t, ts, "POST", path, `{"action":"config","field":"cron","value":"0 0 3 * * ?"}`, tok, nil); code != 200 {
		t.Fatalf("config cron: %d", code)
	}
	if code := apiCall(t, ts, "POST", path, `{"action":"disable","item":3}`, tok, nil); code != 200 {
		t.Fatalf("disable item 3: %d", code)
	}
	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"action":"pause","server":"ghost"}`, 404, "server"},
		{`{"action":"trigger","server":"w1"}`, 409, "server"},
		{`{"action":"disable","item":7}`, 400, "item"},
		{`{"action":"pause","item":1}`, 400, "item"},
		{`{"action":"disable","item":"one"}`, 400, "item"},
		{`{"action":"disable","item":1,"server":"w1"}`, 400, "item"},
		{`{"action":"explode"}`, 400, "action"},
		{`{"action":"pause","serverr":"w1"}`, 400, "serverr"},
		{`{"action":"config","field":"fetchDataCount","value":"0"}`, 400, "value"},
		{`{"action":"config","field":"fetchDataCont","value":"5"}`, 400, "field"},
		{`{"action":"config","field":"cron"}`, 400, "value"},
		{`{"action":"pause","value":"x"}`, 400, "field"},
		{`{"action":"pause"} {"action":"resume"}`, 400, "body"},
		{`not json`, 400, "body"},
	} {
		wantAPIError(t, ts, "POST", path, tc.body, tok, tc.code, tc.field)
	}
	wantAPIError(t, ts, "POST", "/api/v1/jobs/nope/actions", `{"action":"pause"}`, tok, 404, "job")
	form := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/x-www-form-urlencoded"}
	wantAPIError(t, ts, "POST", path, `action=pause`, form, 400, "Content-Type")
	after, err := admin.Status(t.Context(), "api-job")
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Actions) != 4 || after.Config["fetchDataCount"] == "0" {
		t.Fatalf("refused actions changed the job or were audited: %d actions %+v, fetchDataCount %s",
			len(after.Actions), after.Actions, after.Config["fetchDataCount"])
	}
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

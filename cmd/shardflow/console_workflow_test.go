package main

import (
	"encoding/xml"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// TestAPIWorkflows: GET /api/v1/workflows lists the workflow runs with
// each step's state; a bad runs is refused naming it.
func TestAPIWorkflows(t *testing.T) {
	st := memstore.NewServer().Connect()
	t.Cleanup(func() { _ = st.Close() })
	admin := coord.NewAdmin(st, "wfapi")
	for _, c := range []jobconfig.Config{
		{JobName: "a", ShardingTotalCount: 2},
		{JobName: "b", ShardingTotalCount: 2, DependsOn: []string{"a"}},
	} {
		if err := admin.CreateJob(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	a := workflow.ForJob(st, "wfapi", "a")
	pick, err := a.Pick(t.Context(), []int{0, 1}, nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Record(t.Context(), pick.Run, map[int]string{0: "", 1: ""}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newConsole(consoleOptions{admin: admin, namespace: "wfapi", logger: cli.Logger}))
	t.Cleanup(ts.Close)
	var page apiWorkflowPage
	if code := apiCall(t, ts, http.MethodGet, "/api/v1/workflows", "", nil, &page); code != http.StatusOK {
		t.Fatalf("GET /api/v1/workflows: %d", code)
	}
	if len(page.Runs) != 1 || page.Runs[0].Run != pick.Run || len(page.Runs[0].Steps) != 2 ||
		page.Runs[0].Steps[0].State != workflow.StateSucceeded || page.Runs[0].Steps[1].State != workflow.StateRunning {
		t.Fatalf("GET /api/v1/workflows = %+v; want %s with a succeeded and b running", page, pick.Run)
	}
	var e apiError
	if code := apiCall(t, ts, http.MethodGet, "/api/v1/workflows?runs=0", "", nil, &e); code != http.StatusBadRequest || e.Field != "runs" {
		t.Fatalf("runs=0: %d %+v, want 400 naming runs", code, e)
	}
}

// wfFixture serves the console (creds nil: read-only) over a memstore
// diamond a -> {b, c} -> d of 2 items each in namespace "wfc", with one
// workflow run in which a succeeded, b failed, c ran 1 of its 2 items
// and d waits. It returns the server, the store and the run's id.
func wfFixture(t *testing.T, creds *credentials) (*httptest.Server, store.Store, string) {
	t.Helper()
	st := memstore.NewServer().Connect()
	t.Cleanup(func() { _ = st.Close() })
	admin := coord.NewAdmin(st, "wfc")
	for _, c := range []jobconfig.Config{
		{JobName: "a"},
		{JobName: "b", DependsOn: []string{"a"}},
		{JobName: "c", DependsOn: []string{"a"}},
		{JobName: "d", DependsOn: []string{"b", "c"}},
	} {
		c.ShardingTotalCount = 2
		if err := admin.CreateJob(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	pick, err := workflow.ForJob(st, "wfc", "a").Pick(t.Context(), []int{0, 1}, nil, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	// In order: a record in a step not started yet records nothing.
	for _, r := range []struct {
		job string
		out map[int]string
	}{{"a", map[int]string{0: "", 1: ""}}, {"b", map[int]string{0: "", 1: "exit status 3"}}, {"c", map[int]string{1: ""}}} {
		if _, err := workflow.ForJob(st, "wfc", r.job).Record(t.Context(), pick.Run, r.out); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(newConsole(consoleOptions{admin: admin, namespace: "wfc", creds: creds, logger: cli.Logger}))
	t.Cleanup(ts.Close)
	return ts, st, pick.Run
}

// getPage GETs path and returns the body (200 expected).
func getPage(t *testing.T, ts *httptest.Server, path string) string {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

var (
	svgRe     = regexp.MustCompile(`(?s)<svg .*?</svg>`)
	svgStepRe = regexp.MustCompile(`<g class="wf-step" data-job="([^"]*)" data-state="([^"]*)" data-progress="([^"]*)">`)
	svgEdgeRe = regexp.MustCompile(`<path class="wf-edge" data-from="([^"]*)" data-to="([^"]*)"`)
)

// graphOf returns the SVG of a workflow page, checked to be well-formed
// XML, with its steps ("job state progress") and edges ("from->to").
func graphOf(t *testing.T, page string) (svg string, steps, edges []string) {
	t.Helper()
	svg = svgRe.FindString(page)
	if svg == "" {
		t.Fatalf("no <svg> in the page:\n%s", page)
	}
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, m := range svgStepRe.FindAllStringSubmatch(svg, -1) {
		steps = append(steps, html.UnescapeString(m[1])+" "+m[2]+" "+html.UnescapeString(m[3]))
	}
	for _, m := range svgEdgeRe.FindAllStringSubmatch(svg, -1) {
		edges = append(edges, html.UnescapeString(m[1])+"->"+html.UnescapeString(m[2]))
	}
	return svg, steps, edges
}

// TestConsoleWorkflowPages: over real HTTP, the workflow runs page lists
// the run, its page draws the job graph as SVG with every step, its
// state and its items, and every dependsOn edge, the job page links to
// the run, and an unknown run is 404. Anonymous readers see it all, as
// they see the job pages, with no action button.
func TestConsoleWorkflowPages(t *testing.T) {
	ts, _, run := wfFixture(t, nil)
	list := getPage(t, ts, "/workflows")
	if !strings.Contains(list, `href="/workflows/`+run+`"`) || !strings.Contains(list, `data-first="a"`) || !strings.Contains(list, "b 2/2 (1 failed)") {
		t.Fatalf("/workflows does not list %s with its steps:\n%s", run, list)
	}
	page := getPage(t, ts, "/workflows/"+run)
	_, steps, edges := graphOf(t, page)
	wantSteps := []string{"a succeeded 2/2", "b failed 2/2 (1 failed)", "c running 1/2", "d pending -"}
	if !slices.Equal(steps, wantSteps) {
		t.Fatalf("the graph's steps %q, want %q", steps, wantSteps)
	}
	slices.Sort(edges)
	if want := []string{"a->b", "a->c", "b->d", "c->d"}; !slices.Equal(edges, want) {
		t.Fatalf("the graph's edges %q, want %q", edges, want)
	}
	for _, want := range []string{"succeeded · 2/2", "failed · 2/2 (1 failed)", "running · 1/2", "pending · -"} {
		if !strings.Contains(page, want) {
			t.Fatalf("the graph shows no label %q", want)
		}
	}
	if strings.Contains(page, "/act") {
		t.Fatalf("a read-only console's workflow page has action forms:\n%s", page)
	}
	if job := getPage(t, ts, "/jobs/b"); !strings.Contains(job, `href="/workflows/`+run+`"`) {
		t.Fatalf("b's job page does not link to %s:\n%s", run, job)
	}
	resp, err := ts.Client().Get(ts.URL + "/workflows/a-0000000099")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown workflow run: %d, want 404", resp.StatusCode)
	}
}

// TestWorkflowSVGEscapes: names and states from the store (written by
// hand, past the name checks) are escaped: the SVG stays well-formed and
// carries no markup of theirs.
func TestWorkflowSVGEscapes(t *testing.T) {
	evil := `x"><script>alert(1)</script>&amp;'`
	rs := workflow.RunStatus{Run: `r"<b>-0000000001`, Steps: []workflow.Step{
		{Job: evil, State: workflow.StateSucceeded, Total: 1, Completed: 1},
		{Job: "b", State: `<i>odd</i>`, Upstreams: []string{evil}},
	}}
	svg := string(workflowSVG(rs))
	_, steps, edges := graphOf(t, svg)
	if strings.Contains(svg, "<script") || strings.Contains(svg, "<i>") || strings.Contains(svg, "<b>") {
		t.Fatalf("markup from the store in the SVG:\n%s", svg)
	}
	if len(steps) != 2 || !strings.HasPrefix(steps[0], evil) || len(edges) != 1 || edges[0] != evil+"->b" {
		t.Fatalf("steps %q, edges %q; want both steps and the edge, names intact", steps, edges)
	}
}

// TestAPIWorkflowActions: POST /api/v1/workflows/{run}/actions needs what
// every action needs (403 read-only, 401 without credentials), refuses
// a bad request naming its field and an action the run's state does not
// allow with 409, and otherwise says what it did: the steps a skip
// started, the steps a cancel cancelled.
func TestAPIWorkflowActions(t *testing.T) {
	ro, _, run := wfFixture(t, nil)
	path := "/api/v1/workflows/" + run + "/actions"
	wantAPIError(t, ro, "POST", path, `{"action":"cancel"}`, bearer(), 403, "Authorization")

	ts, st, run := wfFixture(t, testCreds(t))
	path = "/api/v1/workflows/" + run + "/actions"
	wantAPIError(t, ts, "POST", path, `{"action":"cancel"}`, nil, 401, "Authorization")
	wantAPIError(t, ts, "POST", path, `{"action":"delete"}`, bearer(), 400, "action")
	wantAPIError(t, ts, "POST", path, `{"action":"skip"}`, bearer(), 400, "job")
	wantAPIError(t, ts, "POST", path, `{"action":"cancel","job":"a"}`, bearer(), 400, "job")
	wantAPIError(t, ts, "POST", path, `{"action":"skip","job":"a","server":"w1"}`, bearer(), 400, "server")
	wantAPIError(t, ts, "POST", "/api/v1/workflows/a-0000000099/actions", `{"action":"cancel"}`, bearer(), 404, "run")
	wantAPIError(t, ts, "POST", path, `{"action":"skip","job":"zz"}`, bearer(), 404, "job")
	e := wantAPIError(t, ts, "POST", path, `{"action":"skip","job":"c"}`, bearer(), 409, "run")
	if !strings.Contains(e.Error, "it is running (1/2 items)") {
		t.Fatalf("skip of the running c: %q", e.Error)
	}
	var res apiWorkflowActionResult
	if code := apiCall(t, ts, "POST", path, `{"action":"skip","job":"b"}`, bearer(), &res); code != 200 || res.Started != nil || res.Actor != "console:token from 127.0.0.1" {
		t.Fatalf("skip b: %d %+v; want nothing started (c runs), by the token", code, res)
	}
	if _, err := workflow.ForJob(st, "wfc", "c").Record(t.Context(), run, map[int]string{0: ""}); err != nil {
		t.Fatal(err)
	}
	var rs workflow.RunStatus
	if code := apiCall(t, ts, "GET", "/api/v1/workflows/"+run, "", nil, &rs); code != 200 || rs.Steps[3].State != workflow.StateRunning {
		t.Fatalf("GET the run: %d %+v; want d running after b's skip and c's completion", code, rs)
	}
	res = apiWorkflowActionResult{}
	if code := apiCall(t, ts, "POST", path, `{"action":"cancel"}`, bearer(), &res); code != 200 || len(res.Cancelled) != 1 || res.Cancelled[0] != (workflowCancelled{Job: "d", Was: "running"}) {
		t.Fatalf("cancel: %d %+v; want d cancelled, was running", code, res)
	}
	e = wantAPIError(t, ts, "POST", path, `{"action":"cancel"}`, bearer(), 409, "run")
	if !strings.Contains(e.Error, "every step of it is decided already") {
		t.Fatalf("a second cancel: %q", e.Error)
	}
}

// TestAPIWorkflowMarkSuccess: a mark-success over HTTP says what it did:
// the steps it started (d, stopped by b's failure), and refuses a
// succeeded step with 409, changing nothing.
func TestAPIWorkflowMarkSuccess(t *testing.T) {
	ts, st, run := wfFixture(t, testCreds(t))
	path := "/api/v1/workflows/" + run + "/actions"
	if _, err := workflow.ForJob(st, "wfc", "c").Record(t.Context(), run, map[int]string{0: ""}); err != nil {
		t.Fatal(err)
	}
	var rs workflow.RunStatus
	if code := apiCall(t, ts, "GET", "/api/v1/workflows/"+run, "", nil, &rs); code != 200 || rs.Steps[3].State != workflow.StateStopped {
		t.Fatalf("GET the run: %d %+v; want d stopped by b's failure", code, rs)
	}
	e := wantAPIError(t, ts, "POST", path, `{"action":"mark-success","job":"c"}`, bearer(), 409, "run")
	if !strings.Contains(e.Error, "the step of c is succeeded; only a failed or stopped step can be marked succeeded") {
		t.Fatalf("mark-success of the succeeded c: %q", e.Error)
	}
	var res apiWorkflowActionResult
	if code := apiCall(t, ts, "POST", path, `{"action":"mark-success","job":"b"}`, bearer(), &res); code != 200 ||
		!slices.Equal(res.Started, []string{"d"}) || res.Action != "mark-success" || res.Job != "b" || res.Actor != "console:token from 127.0.0.1" {
		t.Fatalf("mark-success b: %d %+v; want d started, by the token", code, res)
	}
	if code := apiCall(t, ts, "GET", "/api/v1/workflows/"+run, "", nil, &rs); code != 200 || rs.Steps[1].State != workflow.StateSucceeded || rs.Steps[3].State != workflow.StateRunning {
		t.Fatalf("GET the run: %d %+v; want b succeeded and d running", code, rs)
	}
}

// TestConsoleWorkflowButtons: the run page's forms act (a cancel needs
// its "sure" box ticked) and refuse with the page and the reason.
func TestConsoleWorkflowButtons(t *testing.T) {
	ts, _, run := wfFixture(t, testCreds(t))
	post := func(form string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/workflows/"+run+"/act", strings.NewReader(form))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+testToken)
		client := *ts.Client()
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location") + string(b)
	}
	if code, body := post("action=skip&job=c"); code != http.StatusConflict || !strings.Contains(body, "it is running (1/2 items)") {
		t.Fatalf("skip of the running c: %d %s", code, body)
	}
	if code, body := post("action=cancel"); code != http.StatusBadRequest || !strings.Contains(body, "sure") {
		t.Fatalf("cancel without sure: %d %s", code, body)
	}
	if code, loc := post("action=mark-success&job=b"); code != http.StatusSeeOther || loc != "/workflows/"+run+"?done=wf-mark-success" {
		t.Fatalf("mark-success b: %d %s", code, loc)
	}
	if code, loc := post("action=cancel&confirm=yes"); code != http.StatusSeeOther || loc != "/workflows/"+run+"?done=wf-cancel" {
		t.Fatalf("cancel: %d %s", code, loc)
	}
	if page := getPage(t, ts, "/workflows/"+run+"?done=wf-cancel"); !strings.Contains(page, "workflow run cancelled") || !strings.Contains(page, `data-job="c" data-state="cancelled"`) {
		t.Fatalf("the page after the cancel:\n%s", page)
	}
}

package main

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/workflow"
)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"items":   cli.JoinInts,
	"when":    fmtWhen,
	"utc":     fmtUTC,
	"what":    describeAction,
	"pathesc": url.PathEscape,
	"actArgs": actArgs,
	"millis":  fromMillis,
	"wfArgs":  wfArgs,
}).ParseFS(templateFS, "templates/*.html"))

// layoutStyleHash is the CSP source of the layout's one <style> element
// ("sha256-..."), so the policy allows that style and nothing else.
var layoutStyleHash = func() string {
	b, err := templateFS.ReadFile("templates/layout.html")
	if err != nil {
		panic(err)
	}
	s := string(b)
	start := strings.Index(s, "<style>") + len("<style>")
	end := strings.Index(s, "</style>")
	if start < len("<style>") || end < start {
		panic("console: templates/layout.html has no <style> element")
	}
	sum := sha256.Sum256([]byte(s[start:end]))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}()

// timeOf accepts the time.Time and *time.Time of the status model.
func timeOf(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, !t.IsZero()
	case *time.Time:
		if t != nil && !t.IsZero() {
			return *t, true
		}
	}
	return time.Time{}, false
}

// fromMillis is a workflow step's Unix milliseconds as a time (zero for
// none).
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// fmtWhen shows a time with its date and zone (the console's zone).
func fmtWhen(v any) string {
	t, ok := timeOf(v)
	if !ok {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

// fmtUTC is the exact time, for a tooltip.
func fmtUTC(v any) string {
	t, ok := timeOf(v)
	if !ok {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// actButton is one action button of the job page: a form posting to
// /jobs/{job}/act, with a confirm() prompt when Confirm is set.
type actButton struct {
	Job, Action, Server string
	Item                int
	HasItem             bool
	Label, Confirm      string
}

// actArgs builds an actButton in a template; item < 0 means none.
func actArgs(job, action, server string, item int, label, confirm string) actButton {
	return actButton{Job: job, Action: action, Server: server, Item: item, HasItem: item >= 0, Label: label, Confirm: confirm}
}

// wfButton is one action button of a workflow run's page: a form posting
// to /workflows/{run}/act, with a "sure" checkbox when Confirm is set.
type wfButton struct {
	Run, Action, Job, Label, Confirm string
}

// wfArgs builds a wfButton in a template.
func wfArgs(run, action, job, label, confirm string) wfButton {
	return wfButton{Run: run, Action: action, Job: job, Label: label, Confirm: confirm}
}

// JobSummary is one job's line in the overview and the head of its page.
type JobSummary struct {
	Job     string
	Health  string // coord.JobStatus.Health, "ok, resharding" or "ok, failover pending"
	Healthy bool
	// HealthReasons say why the job is not ok (coord.JobStatus.HealthReasons).
	HealthReasons []string
	Leader        string
	Live          int
	Servers       int
	LastComplete  *time.Time
	NextFire      *time.Time
	LastSuccess   int64
	LastFailure   int64
	TotalSuccess  int64
	TotalFailure  int64
	ConfigError   string
}

func summarize(js coord.JobStatus) JobSummary {
	s := JobSummary{Job: js.Job, Leader: js.Leader, Servers: len(js.Servers), NextFire: js.NextFireTime, ConfigError: js.ConfigError}
	pausedLive := 0
	for _, sv := range js.Servers {
		if sv.Status != "OFFLINE" {
			s.Live++
			if sv.Paused {
				pausedLive++
			}
		}
		s.LastSuccess += sv.ProcessSuccessCount
		s.LastFailure += sv.ProcessFailureCount
		s.TotalSuccess += sv.TotalSuccessCount
		s.TotalFailure += sv.TotalFailureCount
	}
	for _, it := range js.Items {
		if it.LastCompleteTime != nil && (s.LastComplete == nil || it.LastCompleteTime.After(*s.LastComplete)) {
			s.LastComplete = it.LastCompleteTime
		}
	}
	// The job's health is coord's (JobStatus.Health), the same the CLI and
	// the API show; transient states that are fine say what is going on.
	s.Health, s.Healthy, s.HealthReasons = js.Health, js.Health == coord.HealthOK, js.HealthReasons
	switch {
	case !s.Healthy:
	case len(js.FailoverQueue) > 0:
		s.Health = "ok, failover pending"
	case js.ReshardingPending:
		s.Health = "ok, resharding"
	}
	return s
}

// Viewer is what every page knows about the request.
type Viewer struct {
	Namespace string
	CanAct    bool   // credentials are configured
	User      string // the logged-in user, "" when not logged in
	Message   string
	Error     string
	Now       time.Time
}

func (cs *consoleServer) viewerFor(r *http.Request) Viewer {
	v := Viewer{Namespace: cs.namespace, CanAct: cs.creds.configured(), Message: doneMessages[r.URL.Query().Get("done")], Now: time.Now()}
	if who, ok := cs.authenticate(r); ok {
		v.User = who
	}
	return v
}

type overviewPage struct {
	Viewer
	Jobs       []JobSummary
	Unreadable []unreadableJob
}

func (cs *consoleServer) overview(w http.ResponseWriter, r *http.Request) {
	doc, err := collectStatus(r.Context(), cs.admin, cs.namespace, "")
	if err != nil {
		httpError(w, err)
		return
	}
	p := overviewPage{Viewer: cs.viewerFor(r), Unreadable: doc.Unreadable}
	for _, js := range doc.Jobs {
		p.Jobs = append(p.Jobs, summarize(js))
	}
	cs.render(w, "overview.html", p, http.StatusOK)
}

// jobView is the job page.
type jobView struct {
	Viewer
	JobSummary
	Status coord.JobStatus
	// Job-wide actions that apply now.
	AnyLive, AnyUnpaused, AnyPaused, AnyRunning bool
	Config                                      []configRow
	History                                     template.HTML
	HistoryError                                string
	// Workflow are the job's steps in its last workflow runs.
	Workflow      []workflow.Step
	WorkflowError string
}

type configRow struct{ Name, Value string }

func (cs *consoleServer) jobPage(w http.ResponseWriter, r *http.Request) {
	cs.renderJob(w, r, r.PathValue("job"), doneMessages[r.URL.Query().Get("done")], "", http.StatusOK)
}

// doneMessages are the only confirmations a page shows, by the code in
// its ?done= (a link can carry any text; the page shows only these).
var doneMessages = map[string]string{
	"trigger":     "triggered: every live server runs the job now",
	"pause":       "paused",
	"resume":      "resumed",
	"disable":     "disabled",
	"enable":      "enabled",
	"shutdown":    "shut down",
	"remove":      "removed",
	"config":      "config saved",
	"job-removed": "job removed",
	// The workflow page's (it shows what the action started or stopped).
	"wf-skip":         "step skipped: it counts as succeeded for the steps after it",
	"wf-mark-success": "step marked succeeded",
	"wf-rerun":        "the step runs again, with every step after it",
	"wf-cancel":       "workflow run cancelled: no item or step of it starts",
}

// renderJob renders a job page with a message or an error (code).
func (cs *consoleServer) renderJob(w http.ResponseWriter, r *http.Request, job, msg, errText string, code int) {
	js, err := cs.admin.Status(r.Context(), job)
	if err != nil {
		httpError(w, err)
		return
	}
	v := jobView{Viewer: cs.viewerFor(r), JobSummary: summarize(js), Status: js}
	v.Message, v.Error = msg, errText
	for _, sv := range js.Servers {
		if sv.Status == "OFFLINE" {
			continue
		}
		v.AnyLive = true
		v.AnyUnpaused = v.AnyUnpaused || !sv.Paused
		v.AnyPaused = v.AnyPaused || sv.Paused
	}
	for _, it := range js.Items {
		v.AnyRunning = v.AnyRunning || it.Running
	}
	for _, name := range jobconfig.FieldNames() {
		if name == jobconfig.FieldOverwrite {
			continue // meaningful only in a program's local config
		}
		v.Config = append(v.Config, configRow{Name: name, Value: js.Config[name]})
	}
	if v.Workflow, err = cs.admin.JobWorkflowSteps(r.Context(), job, 10); err != nil {
		v.WorkflowError = "workflow runs: " + err.Error()
	}
	if cs.history != nil {
		h, herr := cs.history(r.Context(), job)
		if herr != nil {
			v.HistoryError = herr.Error()
		}
		v.History = h
	}
	cs.render(w, "job.html", v, code)
}

type loginView struct {
	Viewer
	Next      string
	HasToken  bool
	HasBasic  bool
	LoginUser string
}

func (cs *consoleServer) loginPage(w http.ResponseWriter, r *http.Request) {
	cs.render(w, "login.html", cs.loginView(r, ""), http.StatusOK)
}

func (cs *consoleServer) loginView(r *http.Request, errText string) loginView {
	v := loginView{Viewer: cs.viewerFor(r), Next: safeNext(r.FormValue("next")), HasToken: cs.creds.token != nil, HasBasic: cs.creds.password != nil}
	v.Error = errText
	return v
}

// login checks a token or user:password from the login form and sets a
// session cookie (HttpOnly, SameSite=Strict).
func (cs *consoleServer) login(w http.ResponseWriter, r *http.Request) {
	if blocked, left := cs.throttle.blocked(clientAddr(r)); blocked {
		refuseThrottled(w, left)
		return
	}
	var who string
	switch {
	case r.FormValue("token") != "" && cs.creds.checkToken(r.FormValue("token")):
		who = "token"
	case r.FormValue("user") != "" && cs.creds.checkBasic(r.FormValue("user"), r.FormValue("password")):
		who = r.FormValue("user")
	default:
		msg := "wrong credentials"
		if !cs.creds.configured() {
			msg = "this console is read-only: it was started without credentials"
		} else {
			cs.throttle.fail(clientAddr(r))
		}
		cs.render(w, "login.html", cs.loginView(r, msg), http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: cs.sessions.create(who), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: cs.secureRequest(r), MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, safeNext(r.FormValue("next")), http.StatusSeeOther)
}

func (cs *consoleServer) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		cs.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: cs.secureRequest(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on this console: a local path
// (with a query) and nothing a browser could read as another host. Control
// characters (browsers drop a tab: "/\t/evil" is "//evil"), backslashes,
// "//" and anything with a scheme or host fall back to "/".
func safeNext(next string) string {
	for i := 0; i < len(next); i++ {
		if next[i] < 0x20 || next[i] == 0x7f || next[i] == '\\' {
			return "/"
		}
	}
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return u.RequestURI()
}

func (cs *consoleServer) render(w http.ResponseWriter, name string, data any, code int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		cs.logger.Warn("console: render", "page", name, "err", err)
	}
}

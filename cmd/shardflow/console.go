package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/history/pghistory"
)

// HistorySection renders a job's history section for its console page
// (recent runs, a chart). It is the console's extension point: nil means
// no section. It is called once per job page view with the request's ctx;
// an error is shown in place of the section.
type HistorySection func(ctx context.Context, job string) (template.HTML, error)

// consoleOptions configure the console's handler.
type consoleOptions struct {
	admin     *coord.Admin
	namespace string
	creds     *credentials
	// allowedHosts are the host names the console answers to besides IP
	// literals and localhost (hostCheck).
	allowedHosts []string
	// history, when set, adds a history section to each job page.
	history HistorySection
	logger  *slog.Logger
}

// consoleServer serves the console: server-rendered pages (html/template,
// no JavaScript but confirm() on destructive buttons), the status JSON and
// the actions API. Every state-changing request must be same-origin
// (http.CrossOriginProtection) and authenticated (bearer token, basic auth,
// or a session cookie from /login); without credentials configured the
// console is read-only.
type consoleServer struct {
	consoleOptions
	sessions *sessions
}

// runConsole serves the web console until ctx ends.
func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := zkFlagSet("console", stderr)
	listen := fs.String("listen", "127.0.0.1:8899", "address to serve the console on (non-loopback needs credentials)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token for actions (default $"+envConsoleToken+")")
	basicFile := fs.String("basic-auth-file", "", "file holding user:password for actions (default $"+envConsoleBasicAuth+")")
	historyPG := fs.String("history-pg", "", "Postgres DSN of the execution history: adds recent runs, failures and a chart to job pages")
	var allowedHosts stringList = allowedHostsFromEnv()
	fs.Var(&allowedHosts, "allowed-host", "a host name the console is reached under, besides IP addresses and localhost (repeatable; default $"+envConsoleAllowedHosts+"; * for any): other names are refused against DNS rebinding")
	historyTable := fs.String("history-table", pghistory.DefaultTable, "history table, optionally SCHEMA.TABLE")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	creds, err := loadCredentials(*tokenFile, *basicFile)
	if err != nil {
		return usageError{err.Error()}
	}
	if err := requireLoopbackOrAuth(*listen, creds); err != nil {
		return usageError{err.Error()}
	}
	st, admin, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w (choose another --listen address)", *listen, err)
	}
	var hist HistorySection
	if *historyPG != "" {
		var closeHist func()
		if hist, closeHist, err = openHistorySection(ctx, *historyPG, *historyTable); err != nil {
			return err
		}
		defer closeHist()
	}
	h := newConsole(consoleOptions{admin: admin, namespace: cf.namespace, creds: creds, history: hist, logger: cliLogger, allowedHosts: allowedHosts})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	mode := "actions need a login"
	if !creds.configured() {
		mode = "read-only: set --token-file or --basic-auth-file to enable actions"
	}
	fmt.Fprintf(stdout, "console on http://%s (namespace %q; %s)\n", ln.Addr(), cf.namespace, mode)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

// newConsole returns the console's handler, separate from serving so tests
// can drive it with httptest.
func newConsole(o consoleOptions) http.Handler {
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.creds == nil {
		o.creds = &credentials{}
	}
	cs := &consoleServer{consoleOptions: o, sessions: newSessions()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", cs.overview)
	mux.HandleFunc("GET /jobs/{job}", cs.jobPage)
	mux.HandleFunc("POST /jobs/{job}/act", cs.requireAuth(cs.act))
	mux.HandleFunc("GET /login", cs.loginPage)
	mux.HandleFunc("POST /login", cs.login)
	mux.HandleFunc("POST /logout", cs.logout)
	mux.HandleFunc("GET /api/status", cs.apiStatus)
	mux.HandleFunc("POST /api/jobs/{job}/{action}", cs.requireAuth(cs.apiAction))
	// Cross-origin state-changing requests (a web page the operator opens
	// posting here) are refused with 403 before any handler runs.
	// A request under a host name not ours (DNS rebinding) is refused
	// before anything else.
	return newHostCheck(o.allowedHosts).wrap(http.NewCrossOriginProtection().Handler(securityHeaders(mux)))
}

// securityHeaders forbids framing and sniffing, and any script but the
// pages' own inline confirm() handlers.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src-attr 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

type ctxKey struct{}

// requireAuth lets an authenticated request through to h with its Admin
// acting as that user; others get 401 (403 when the console is read-only).
func (cs *consoleServer) requireAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !cs.creds.configured() {
			http.Error(w, "console: read-only: no credentials configured; restart it with --token-file or --basic-auth-file to act", http.StatusForbidden)
			return
		}
		who, ok := cs.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardflow", Basic realm="shardflow"`)
			http.Error(w, "console: authentication required: send a bearer token or basic-auth credentials, or log in at /login", http.StatusUnauthorized)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, cs.admin.As(actorFor(who, r)))))
	}
}

// adminFor is the Admin acting as the authenticated user of r.
func adminFor(r *http.Request) *coord.Admin { return r.Context().Value(ctxKey{}).(*coord.Admin) }

func (cs *consoleServer) apiStatus(w http.ResponseWriter, r *http.Request) {
	doc, err := collectStatus(r.Context(), cs.admin, cs.namespace, r.URL.Query().Get("job"))
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

// apiAction is POST /api/jobs/{job}/{action} with form fields server,
// item, field and value: 204 on success.
func (cs *consoleServer) apiAction(w http.ResponseWriter, r *http.Request) {
	if err := cs.perform(r, r.PathValue("action")); err != nil {
		httpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// act is the job page's form target: it performs the action and redirects
// back with a message, or renders the page again with the error.
func (cs *consoleServer) act(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	action := r.FormValue("action")
	if err := cs.perform(r, action); err != nil {
		code := errorStatus(err)
		if code == http.StatusNotFound && errors.Is(err, coord.ErrNoJob) {
			httpError(w, err)
			return
		}
		cs.renderJob(w, r, job, "", err.Error(), code)
		return
	}
	if action == "remove" && r.FormValue("server") == "" {
		http.Redirect(w, r, "/?done="+url.QueryEscape("removed job "+job), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/jobs/"+url.PathEscape(job)+"?done="+url.QueryEscape(describeForm(action, r)), http.StatusSeeOther)
}

// perform runs one operator action from r's form through the Admin acting
// as r's user.
func (cs *consoleServer) perform(r *http.Request, action string) error {
	admin := adminFor(r)
	job := r.PathValue("job")
	if action == "config" {
		return admin.SetConfig(r.Context(), job, r.FormValue("field"), r.FormValue("value"))
	}
	item := noItem
	if v := r.FormValue("item"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return usagef("item %q is not a shard item number", v)
		}
		item = n
	}
	return doAction(r.Context(), admin, action, job, r.FormValue("server"), item)
}

// describeForm is the confirmation shown after an action.
func describeForm(action string, r *http.Request) string {
	switch {
	case action == "config":
		return fmt.Sprintf("set %s = %q", r.FormValue("field"), r.FormValue("value"))
	case r.FormValue("item") != "":
		return action + " item " + r.FormValue("item")
	case r.FormValue("server") != "":
		return action + " server " + r.FormValue("server")
	case action == "trigger":
		return "triggered"
	}
	return action + " on every server"
}

func errorStatus(err error) int {
	var ue usageError
	switch {
	case errors.Is(err, coord.ErrNoJob), errors.Is(err, coord.ErrNoServer):
		return http.StatusNotFound
	case errors.As(err, &ue), errors.Is(err, coord.ErrNoItem), errors.Is(err, jobconfig.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, coord.ErrBadConfig):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func httpError(w http.ResponseWriter, err error) {
	http.Error(w, err.Error(), errorStatus(err))
}

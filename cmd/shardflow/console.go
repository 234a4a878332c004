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
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/history"
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
	// trustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-Proto is believed: "https" from one makes the session
	// cookie Secure (as a TLS connection does).
	trustedProxies []*net.IPNet
	// history, when set, adds a history section to each job page.
	history HistorySection
	// historyReader, when set, serves GET /api/v1/jobs/{job}/history.
	historyReader history.Reader
	logger        *slog.Logger
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
	throttle *throttle
}

// runConsole serves the web console until ctx ends.
func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("console", stderr)
	listen := fs.String("listen", "127.0.0.1:8899", "address to serve the console on (non-loopback needs credentials)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token for actions (default $"+envConsoleToken+")")
	basicFile := fs.String("basic-auth-file", "", "file holding user:password for actions (default $"+envConsoleBasicAuth+")")
	historyPG := new(string)
	secretVar(fs, historyPG, "history-pg", envHistoryPG, "Postgres DSN of the execution history: adds recent runs, failures and a chart to job pages")
	var allowedHosts stringList = allowedHostsFromEnv()
	fs.Var(&allowedHosts, "allowed-host", "a host name the console is reached under, besides IP addresses and localhost (repeatable; default $"+envConsoleAllowedHosts+"; * for any): other names are refused against DNS rebinding")
	tlsCert := fs.String("tls-cert", "", "PEM certificate file: serve HTTPS (with --tls-key); session cookies are then Secure")
	tlsKey := fs.String("tls-key", "", "PEM private key file of --tls-cert")
	var proxies stringList
	fs.Var(&proxies, "trusted-proxy", "address or CIDR of a TLS-terminating reverse proxy whose X-Forwarded-Proto: https makes session cookies Secure (repeatable)")
	historyTable := fs.String("history-table", pghistory.DefaultTable, "history table, optionally SCHEMA.TABLE")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return cli.Usagef("--tls-cert and --tls-key go together: give both to serve HTTPS")
	}
	trusted, err := parseTrustedProxies(proxies)
	if err != nil {
		return cli.Usagef("%s", err.Error())
	}
	creds, err := loadCredentials(*tokenFile, *basicFile)
	if err != nil {
		return cli.Usagef("%s", err.Error())
	}
	if err := requireLoopbackOrAuth(*listen, creds); err != nil {
		return cli.Usagef("%s", err.Error())
	}
	st, admin, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w (choose another --listen address)", *listen, err)
	}
	var hist HistorySection
	var histReader history.Reader
	if *historyPG != "" {
		var closeHist func()
		if histReader, closeHist, err = openHistory(ctx, *historyPG, *historyTable); err != nil {
			return err
		}
		defer closeHist()
		hist = historySection(histReader, time.Now)
	}
	h := newConsole(consoleOptions{admin: admin, namespace: cf.Namespace, creds: creds, history: hist, historyReader: histReader,
		logger: cli.Logger, allowedHosts: allowedHosts, trustedProxies: trusted})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	mode := "actions need a login"
	if !creds.configured() {
		mode = "read-only: set --token-file or --basic-auth-file to enable actions"
	}
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "console on %s (namespace %q; %s)\n", consoleURL(scheme, ln.Addr()), cf.Namespace, mode)
	if scheme == "http" && len(trusted) == 0 && creds.configured() && !loopbackListen(*listen) {
		fmt.Fprintln(stderr, "console: warning: credentials and session cookies travel in clear text; serve HTTPS (--tls-cert, --tls-key) or behind a TLS proxy (--trusted-proxy)")
	}
	errc := make(chan error, 1)
	go func() {
		if *tlsCert != "" {
			errc <- srv.ServeTLS(ln, *tlsCert, *tlsKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
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
	_, h := buildConsole(o)
	return h
}

// buildConsole is newConsole that also returns the server, for tests.
func buildConsole(o consoleOptions) (*consoleServer, http.Handler) {
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.creds == nil {
		o.creds = &credentials{}
	}
	cs := &consoleServer{consoleOptions: o, sessions: newSessions(), throttle: newThrottle()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", cs.overview)
	mux.HandleFunc("GET /jobs/{job}", cs.jobPage)
	mux.HandleFunc("POST /jobs/{job}/act", cs.requireAuth(cs.act))
	mux.HandleFunc("GET /login", cs.loginPage)
	mux.HandleFunc("POST /login", cs.login)
	mux.HandleFunc("POST /logout", cs.logout)
	mux.HandleFunc("GET /api/status", cs.apiStatus)
	mux.HandleFunc("POST /api/jobs/{job}/{action}", cs.requireAuth(cs.apiAction))
	cs.routeAPI(mux)
	cs.routeWorkflows(mux)
	// Cross-origin state-changing requests (a web page the operator opens
	// posting here) are refused with 403 before any handler runs.
	// A request under a host name not ours (DNS rebinding) is refused
	// before anything else.
	inner := securityHeaders(mux)
	pages := http.NewCrossOriginProtection().Handler(inner)
	// The API's refusal is JSON like its other errors.
	apiCOP := http.NewCrossOriginProtection()
	apiCOP.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusForbidden, "Origin", "console: cross-origin request refused: a web page of another site cannot act here; "+
			"scripts (curl) send no Origin or Sec-Fetch-Site header of another site")
	}))
	api := apiCOP.Handler(inner)
	return cs, newHostCheck(o.allowedHosts).wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, apiPrefix) {
			api.ServeHTTP(w, r)
			return
		}
		pages.ServeHTTP(w, r)
	}))
}

// securityHeaders forbids framing, sniffing and every script (the pages
// have none: a destructive button asks for a "sure" checkbox instead of a
// confirm() prompt), and every style but the layout's own (by its hash).
func securityHeaders(h http.Handler) http.Handler {
	csp := "default-src 'none'; style-src '" + layoutStyleHash + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", csp)
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
			deny(w, r, http.StatusForbidden, "console: read-only: no credentials configured; restart it with --token-file or --basic-auth-file to act")
			return
		}
		if blocked, left := cs.throttle.blocked(clientAddr(r)); blocked {
			refuseThrottled(w, left)
			return
		}
		who, ok := cs.authenticate(r)
		if !ok {
			if r.Header.Get("Authorization") != "" {
				cs.throttle.fail(clientAddr(r)) // a wrong token or password, not a missing one
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardflow", Basic realm="shardflow"`)
			deny(w, r, http.StatusUnauthorized, "console: authentication required: send a bearer token or basic-auth credentials, or log in at /login")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, cs.admin.As(actorFor(who, r)))))
	}
}

// deny refuses r with code: JSON naming the credentials for the API
// (apiError), plain text for the pages.
func deny(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if strings.HasPrefix(r.URL.Path, apiPrefix) {
		writeAPIError(w, code, "Authorization", msg)
		return
	}
	http.Error(w, msg, code)
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
		http.Redirect(w, r, "/?done=job-removed", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/jobs/"+url.PathEscape(job)+"?done="+url.QueryEscape(action), http.StatusSeeOther)
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
			return cli.Usagef("item %q is not a shard item number", v)
		}
		item = n
	}
	return doAction(r.Context(), admin, action, job, r.FormValue("server"), item)
}

func errorStatus(err error) int {
	var ue cli.UsageError
	switch {
	case errors.Is(err, coord.ErrNoJob), errors.Is(err, coord.ErrNoServer), errors.Is(err, coord.ErrNoWorkflowRun):
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

// consoleURL is the address to open for a console (scheme http or
// https) listening on addr: on
// every interface (0.0.0.0, ::) that is this host's name, never
// "http://[::]:PORT", which no browser opens.
func consoleURL(scheme string, addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return scheme + "://" + addr.String()
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	port := strconv.Itoa(tcp.Port)
	return fmt.Sprintf("%s://%s (every interface, port %s; on this host %s://127.0.0.1:%s)",
		scheme, net.JoinHostPort(host, port), port, scheme, port)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// runConsole serves the web console: a status page refreshed every few
// seconds, the status JSON at /api/status, and operator actions as POSTs.
func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf connFlags
	cf.register(fs)
	listen := fs.String("listen", "127.0.0.1:8899", "address to serve the console on")
	if err := fs.Parse(args); err != nil {
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
	srv := &http.Server{Handler: consoleHandler(admin, cf.namespace), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "console on http://%s (namespace %q)\n", ln.Addr(), cf.namespace)
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

// consoleHandler is the console's HTTP API, separate from serving so tests
// can drive it with httptest.
func consoleHandler(admin *coord.Admin, namespace string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		doc, err := collectStatus(r.Context(), admin, namespace, r.URL.Query().Get("job"))
		if err != nil {
			httpError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	mux.HandleFunc("POST /api/jobs/{job}/{action}", func(w http.ResponseWriter, r *http.Request) {
		item := noItem
		if v := r.FormValue("item"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				http.Error(w, "item must be a shard item number", http.StatusBadRequest)
				return
			}
			item = n
		}
		action := r.PathValue("action")
		err := doAction(r.Context(), admin, action, r.PathValue("job"), r.FormValue("server"), item)
		if err != nil {
			httpError(w, err)
			return
		}
		if r.FormValue("redirect") != "" {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		doc, err := collectStatus(r.Context(), admin, namespace, "")
		if err != nil {
			httpError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := consolePage.Execute(w, doc); err != nil {
			slog.Warn("console: render", "err", err)
		}
	})
	return mux
}

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var ue usageError
	switch {
	case errors.Is(err, coord.ErrNoJob), errors.Is(err, coord.ErrNoServer):
		code = http.StatusNotFound
	case errors.As(err, &ue), errors.Is(err, coord.ErrNoItem), errors.Is(err, jobconfig.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, coord.ErrBadConfig):
		code = http.StatusConflict
	}
	http.Error(w, err.Error(), code)
}

var consolePage = template.Must(template.New("console").Funcs(template.FuncMap{
	"items": joinInts,
	"time":  fmtTime,
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>shardflow console</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3} .err{color:#b00} form{display:inline}
button{font-size:.8em}
</style></head><body>
<h1>shardflow <small>namespace {{.Namespace}}</small></h1>
{{if not .Jobs}}<p>No jobs.</p>{{end}}
{{range .Jobs}}{{$job := .Job}}
<h2>{{.Job}} <small>leader {{.Leader}}{{if .ReshardingPending}}, resharding pending{{end}}</small>
<form method="post" action="/api/jobs/{{.Job}}/trigger"><input type="hidden" name="redirect" value="1"><button>trigger</button></form></h2>
{{if .ConfigError}}<p class="err">config error: {{.ConfigError}}</p>{{end}}
<table><tr><th>server</th><th>status</th><th>items</th><th>success</th><th>failure</th><th>flags</th><th>last error</th><th>actions</th></tr>
{{range .Servers}}<tr><td>{{.ID}}</td><td>{{.Status}}</td><td>{{items .Sharding}}</td><td>{{.ProcessSuccessCount}}</td><td>{{.ProcessFailureCount}}</td>
<td>{{if .Disabled}}disabled {{end}}{{if .Paused}}paused {{end}}{{if .Shutdown}}shutdown{{end}}</td><td class="err">{{.LastError}}</td><td>
<form method="post" action="/api/jobs/{{$job}}/{{if .Paused}}resume{{else}}pause{{end}}"><input type="hidden" name="server" value="{{.ID}}"><input type="hidden" name="redirect" value="1"><button>{{if .Paused}}resume{{else}}pause{{end}}</button></form>
<form method="post" action="/api/jobs/{{$job}}/{{if .Disabled}}enable{{else}}disable{{end}}"><input type="hidden" name="server" value="{{.ID}}"><input type="hidden" name="redirect" value="1"><button>{{if .Disabled}}enable{{else}}disable{{end}}</button></form>
<form method="post" action="/api/jobs/{{$job}}/shutdown"><input type="hidden" name="server" value="{{.ID}}"><input type="hidden" name="redirect" value="1"><button>shutdown</button></form>
</td></tr>{{end}}</table>
<table><tr><th>item</th><th>running</th><th>completed</th><th>failover</th><th>misfire</th><th>disabled</th><th>last begin</th><th>last complete</th><th>next fire</th></tr>
{{range .Items}}<tr><td>{{.Item}}</td><td>{{.Running}}</td><td>{{.Completed}}</td><td>{{.Failover}}</td><td>{{.Misfire}}</td><td>{{.Disabled}}</td><td>{{time .LastBeginTime}}</td><td>{{time .LastCompleteTime}}</td><td>{{time .NextFireTime}}</td></tr>{{end}}
</table>{{end}}
</body></html>
`))

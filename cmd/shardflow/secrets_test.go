package main

import (
	"context"
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
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// planted are the secrets the secret scans store and echo; no surface may
// show one.
var planted = []string{"hdr-bearer-7f3a", "query-key-7f3b", "set-key-7f3c", "dsn-pass-7f3d", "refused-key-7f3e", "url-pass-7f3f"}

// TestSecretsNeverShown plants secrets in HTTP jobs (a header, URL query
// strings, a header set later with `config set`, a DSN password echoed by
// the endpoint's error body) and scans every surface: `status` and its
// JSON, `config get`, `job list` and its JSON, `config set`'s echo, the
// worker's log (with every run logged), the console's pages, /api/status
// and /api/v1. Before redaction every one of them showed the header and
// the query string. On the embedded store; TestSecretsNeverShownZooKeeper
// runs the same scan on real ZooKeeper with the history in Postgres.
func TestSecretsNeverShown(t *testing.T) {
	srv := memstore.NewServer()
	prev := cli.DialStore
	cli.DialStore = func(context.Context, []string, *cli.ConnFlags) (store.Store, error) { return srv.Connect(), nil }
	t.Cleanup(func() { cli.DialStore = prev })
	admin := coord.NewAdmin(srv.Connect(), "secrets")
	scanForSecrets(t, []string{"--zk", "mem:1", "--namespace", "secrets"}, admin, "")
}

// TestSecretsNeverShownZooKeeper is the secret scan on real ZooKeeper,
// the worker recording its runs in Postgres: `history` (text and JSON)
// and the console's history section are scanned too.
func TestSecretsNeverShownZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	dsn := integration.SharedPostgres(t).NewDatabase(t)
	st, err := zkstore.Open(context.Background(), zkstore.Config{Servers: zk.Servers()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn := []string{"--zk", strings.Join(zk.Servers(), ","), "--namespace", "secrets"}
	scanForSecrets(t, conn, coord.NewAdmin(st, "secrets"), dsn)
}

// scanForSecrets plants the secrets through the CLI (conn), runs a worker
// that fails on them, and scans every surface; with historyDSN the worker
// records its runs there and the history surfaces are scanned too.
func scanForSecrets(t *testing.T, conn []string, admin *coord.Admin, historyDSN string) {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "upstream refused "+r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key")+
			" connecting to postgres://app:dsn-pass-7f3d@db/orders password=dsn-pass-7f3d")
	}))
	defer endpoint.Close()
	sf := func(args ...string) string {
		t.Helper()
		// The connection flags before the first flag: positional
		// arguments (config set's FIELD VALUE) come last.
		i := 0
		for i < len(args) && !strings.HasPrefix(args[i], "-") {
			i++
		}
		full := append(append(append([]string(nil), args[:i]...), conn...), args[i:]...)
		out, errOut, code := runCLI(t, full...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out + errOut
	}
	var surfaces []string
	surfaces = append(surfaces, sf("job", "add", "--job", "hook", "--type", "http", "--total", "1",
		"--url", endpoint.URL+"/run?api_key=query-key-7f3b", "--header", "Authorization: Bearer hdr-bearer-7f3a"))
	surfaces = append(surfaces, sf("job", "add", "--job", "elsewhere", "--type", "http", "--total", "1",
		"--url", "https://user:url-pass-7f3f@other.internal/run?token=refused-key-7f3e"))
	surfaces = append(surfaces, sf("config", "set", "--job", "hook", "httpHeaders", "Authorization: Bearer hdr-bearer-7f3a\nX-Api-Key: set-key-7f3c"))

	ctx, cancel := context.WithCancel(context.Background())
	var serveOut, serveErr syncBuffer
	served := make(chan int, 1)
	serveArgs := []string{"serve", "-v", "--server-id", "w1", "--allow-url", endpoint.URL + "/"}
	if historyDSN != "" {
		serveArgs = append(serveArgs, "--history-pg", historyDSN)
	}
	go func() { served <- run(ctx, append(serveArgs, conn...), &serveOut, &serveErr) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			testwait.Recv(t, 30*time.Second, "serve to stop", served)
		}
	}
	defer stop()
	testwait.For(t, 30*time.Second, "the worker to join hook and refuse elsewhere", func() bool {
		out, _, _ := runCLI(t, append([]string{"job", "list", "--json"}, conn...)...)
		var rows []jobRow
		if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
			return false
		}
		return rows[0].Job == "elsewhere" && len(rows[0].Refused) == 1 && rows[1].Job == "hook" && rows[1].Servers == 1
	})
	sf("trigger", "--job", "hook")
	testwait.For(t, 30*time.Second, "the failed request in the worker's log", func() bool {
		return strings.Contains(serveErr.String(), "502")
	})
	stop() // its last runs recorded in the history

	surfaces = append(surfaces,
		sf("status"), sf("status", "--json"), sf("config", "get", "--job", "hook"), sf("config", "get", "--job", "elsewhere"),
		sf("job", "list"), sf("job", "list", "--json"))
	var hist HistorySection
	var histReader history.Reader
	paths := []string{"/", "/jobs/hook", "/jobs/elsewhere", "/api/status", "/api/status?job=hook",
		"/api/v1/jobs", "/api/v1/jobs/hook", "/api/v1/jobs/elsewhere"}
	if historyDSN != "" {
		for _, args := range [][]string{{"history", "--pg", historyDSN}, {"history", "--pg", historyDSN, "--json"}} {
			out, errOut, code := runCLI(t, args...)
			if code != 0 || !strings.Contains(out, "HTTP request failed") {
				t.Fatalf("%v: exit %d, want the failed run\n%s%s", args[:1], code, out, errOut)
			}
			surfaces = append(surfaces, out)
		}
		reader, closeHist, err := openHistory(context.Background(), historyDSN, pghistory.DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		defer closeHist()
		hist, histReader = historySection(reader, time.Now), reader
		paths = append(paths, "/api/v1/jobs/hook/history")
	}
	h := newConsole(consoleOptions{admin: admin, namespace: "secrets", creds: &credentials{}, history: hist, historyReader: histReader,
		logger: cli.Logger, allowedHosts: []string{"example.com"}})
	for _, path := range paths {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		surfaces = append(surfaces, rec.Body.String())
	}
	surfaces = append(surfaces, serveOut.String(), serveErr.String())

	all := strings.Join(surfaces, "\n----\n")
	for _, s := range planted {
		if i := strings.Index(all, s); i >= 0 {
			t.Errorf("secret %q shown: ...%s...", s, all[max(0, i-200):min(len(all), i+100)])
		}
	}
	// The redacted views still say what the job is and what went wrong.
	for _, want := range []string{"api_key=REDACTED", "Authorization: REDACTED", "upstream refused"} {
		if !strings.Contains(all, want) {
			t.Errorf("no surface shows %q", want)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// TestBrokenJobListedBesideOthers: a job whose nodes are malformed (its
// config node without the servers and execution nodes) is reported beside
// the readable jobs by `status`, `status --json`, `job list` and the
// console's overview, which all failed whole before.
func TestBrokenJobListedBesideOthers(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	startNode(t, srv, "bounded", "good", 2)
	sess := srv.Connect()
	defer sess.Close()
	ctx := context.Background()
	if err := store.CreateAll(ctx, sess, "/bounded/broken/config"); err != nil {
		t.Fatal(err)
	}
	zk := []string{"--zk", "mem:1", "--namespace", "bounded"}

	out, errOut, code := runCLI(t, append([]string{"status"}, zk...)...)
	if code != 0 || !strings.Contains(out, "job good") || !strings.Contains(out, "job broken   UNREADABLE") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runCLI(t, append([]string{"status", "--json"}, zk...)...)
	var doc statusDocument
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Jobs) != 1 || len(doc.Unreadable) != 1 || doc.Unreadable[0].Job != "broken" {
		t.Errorf("status --json: exit %d\n%s", code, out)
	}
	out, errOut, code = runCLI(t, append([]string{"job", "list"}, zk...)...)
	if code != 0 || !strings.Contains(out, "good ") || !strings.Contains(out, "config error: unreadable:") {
		t.Errorf("job list: exit %d\n%s%s", code, out, errOut)
	}
	// One job named: its error is the command's.
	if _, errOut, code := runCLI(t, append([]string{"status", "--job", "broken"}, zk...)...); code != 1 || !strings.Contains(errOut, "broken") {
		t.Errorf("status --job broken: exit %d %s", code, errOut)
	}

	h := newConsole(consoleOptions{admin: coord.NewAdmin(sess, "bounded"), namespace: "bounded", creds: &credentials{}, logger: cli.Logger, allowedHosts: []string{"example.com"}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `href="/jobs/good"`) || !strings.Contains(rec.Body.String(), "Unreadable jobs") {
		t.Errorf("console overview: %d\n%s", rec.Code, rec.Body)
	}
}

// TestOversizedJobRefused: `job add` and `config set` refuse a
// shardingTotalCount over the limit, naming it (20,000,000 was stored and
// spun the workers before).
func TestOversizedJobRefused(t *testing.T) {
	srv := memstore.NewServer()
	useMemstore(t, srv)
	zk := []string{"--zk", "mem:1", "--namespace", "bounded"}
	_, errOut, code := runCLI(t, append([]string{"job", "add", "--job", "big", "--type", "script", "--total", "20000000", "--command", "/bin/true"}, zk...)...)
	if code != 2 || !strings.Contains(errOut, "shardingTotalCount") || !strings.Contains(errOut, "limit of 10000") {
		t.Errorf("job add --total 20000000: exit %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, append([]string{"job", "add", "--job", "big", "--type", "script", "--total", "2", "--command", "/bin/true"}, zk...)...); code != 0 {
		t.Fatalf("job add: %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, append(append([]string{"config", "set"}, zk...), "--job", "big", "shardingTotalCount", "20000000")...)
	if code == 0 || !strings.Contains(errOut, "limit of 10000") {
		t.Errorf("config set shardingTotalCount 20000000: exit %d %s", code, errOut)
	}
}

// TestConsoleRefusesForeignHost: a request naming a host the console does
// not serve (a DNS-rebinding page) is refused with 421; IP literals,
// localhost and the allowed names are served.
func TestConsoleRefusesForeignHost(t *testing.T) {
	h, _ := consoleFixture(t, nil, nil) // allows example.com
	for host, want := range map[string]int{
		"attacker.example:8899": http.StatusMisdirectedRequest,
		"rebind.attacker.test":  http.StatusMisdirectedRequest,
		"127.0.0.1:8899":        http.StatusOK,
		"[::1]:8899":            http.StatusOK,
		"localhost:8899":        http.StatusOK,
		"example.com":           http.StatusOK,
		"EXAMPLE.COM.":          http.StatusOK,
	} {
		req := httptest.NewRequest("GET", "/api/status", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d, want %d (%s)", host, rec.Code, want, rec.Body)
		}
		if want != http.StatusOK && !strings.Contains(rec.Body.String(), "--allowed-host") {
			t.Errorf("Host %s: refusal does not name the fix: %s", host, rec.Body)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
)

type nopJob struct{}

func (nopJob) Fetch(context.Context, dataflow.Shard) ([]int, error) { return nil, nil }
func (nopJob) Process(context.Context, dataflow.Shard, int) error   { return nil }

// consoleFixture runs one Node with job "console-job" on a memstore server and
// returns the console's handler over another session of the same tree.
func consoleFixture(t *testing.T) (http.Handler, *coord.Admin) {
	t.Helper()
	srv := memstore.NewServer()
	nodeSession, adminSession := srv.Connect(), srv.Connect()
	t.Cleanup(func() { _ = nodeSession.Close(); _ = adminSession.Close() })
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: nodeSession, ServerID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := dataflow.AddJob[int](node, dataflow.JobConfig{JobName: "console-job", ShardingTotalCount: 3}, nopJob{}); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	admin := coord.NewAdmin(adminSession, "")
	return consoleHandler(admin, coord.DefaultNamespace), admin
}

func TestConsoleStatusAndActions(t *testing.T) {
	h, admin := consoleFixture(t)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/status", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/status: %d %s", rec.Code, rec.Body)
	}
	var doc statusDocument
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Jobs) != 1 || doc.Jobs[0].Job != "console-job" || len(doc.Jobs[0].Servers) != 1 || doc.Jobs[0].Servers[0].ID != "s1" {
		t.Fatalf("status document: %+v", doc)
	}

	form := url.Values{"server": {"s1"}}
	req := httptest.NewRequest("POST", "/api/jobs/console-job/pause", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("POST pause: %d %s", rec.Code, rec.Body)
	}
	st, err := admin.Status(context.Background(), "console-job")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Servers[0].Paused {
		t.Fatalf("server s1 not paused after the console's pause: %+v", st.Servers[0])
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "console-job") || !strings.Contains(rec.Body.String(), ">resume<") {
		t.Fatalf("GET /: %d, page lacks the job or its resume button:\n%s", rec.Code, rec.Body)
	}
}

func TestConsoleRefusesBadInput(t *testing.T) {
	h, _ := consoleFixture(t)
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/api/jobs/console-job/disable?item=x", http.StatusBadRequest},
		{"/api/jobs/console-job/disable?item=-1", http.StatusBadRequest},
		{"/api/jobs/console-job/disable?item=3", http.StatusBadRequest},
		{"/api/jobs/no-such-job/trigger", http.StatusNotFound},
		{"/api/jobs/console-job/explode", http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", tc.path, nil))
		if rec.Code != tc.want {
			t.Errorf("POST %s: %d %q, want %d", tc.path, rec.Code, rec.Body, tc.want)
		}
	}
}

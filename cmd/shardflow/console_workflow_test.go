package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
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

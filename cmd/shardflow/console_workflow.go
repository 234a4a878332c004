package main

import (
	"net/http"
	"strconv"

	"github.com/shardflow/shardflow/coord/workflow"
)

// apiWorkflowPage is the body of GET /api/v1/workflows.
type apiWorkflowPage struct {
	Namespace string               `json:"namespace"`
	Runs      []workflow.RunStatus `json:"runs"`
}

// apiWorkflows is GET /api/v1/workflows?job=FIRST&runs=N: the last N
// (default 10, at most workflow.KeepRuns) workflow runs of each job that
// starts workflow runs (or of FIRST alone), newest first, each with its
// steps, as `shardflow workflow status --json` prints them.
func (cs *consoleServer) apiWorkflows(w http.ResponseWriter, r *http.Request) {
	n := 10
	if v := r.URL.Query().Get("runs"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 || n > workflow.KeepRuns {
			writeAPIError(w, http.StatusBadRequest, "runs", "runs must be a number from 1 to "+strconv.Itoa(workflow.KeepRuns)+", got "+strconv.Quote(v))
			return
		}
	}
	runs, err := cs.admin.WorkflowRuns(r.Context(), r.URL.Query().Get("job"), n)
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiWorkflowPage{Namespace: cs.namespace, Runs: runs})
}

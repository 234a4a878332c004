package jobs

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/dataflow"
)

// TestWorkflowRunReachesScriptsAndRequests: an item run in a workflow run
// gives its id to a script (SHARDFLOW_WORKFLOW_RUN) and to an HTTP job
// (the Shardflow-Workflow-Run header and the body's workflowRun); an item
// in no workflow gets neither.
func TestWorkflowRunReachesScriptsAndRequests(t *testing.T) {
	in := NewShardContext(dataflow.Shard{JobName: "load", ServerID: "w1", Item: 1, Total: 2, WorkflowRun: "extract-0000000007"})
	if !slices.Contains(in.Env(), "SHARDFLOW_WORKFLOW_RUN=extract-0000000007") {
		t.Fatalf("Env() = %v, want SHARDFLOW_WORKFLOW_RUN", in.Env())
	}
	out := NewShardContext(dataflow.Shard{JobName: "alone", ServerID: "w1", Item: 0, Total: 1})
	for _, e := range out.Env() {
		if len(e) > 22 && e[:22] == "SHARDFLOW_WORKFLOW_RUN" {
			t.Fatalf("Env() of a job in no workflow has %s", e)
		}
	}
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Get(WorkflowRunHeader) }))
	defer srv.Close()
	if err := runHTTP(t.Context(), srv.Client(), HTTPRequest{URL: srv.URL}, in); err != nil {
		t.Fatal(err)
	}
	if header != "extract-0000000007" {
		t.Fatalf("%s header = %q, want the workflow run", WorkflowRunHeader, header)
	}
	if string(in.JSON()) == string(out.JSON()) || !contains(in.JSON(), `"workflowRun":"extract-0000000007"`) || contains(out.JSON(), "workflowRun") {
		t.Fatalf("JSON: %s and %s; want workflowRun only in the first", in.JSON(), out.JSON())
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

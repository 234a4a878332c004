package pghistory_test

import (
	"fmt"
	"testing"

	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

// TestWorkflowRunColumn: a table made before workflows gets the
// workflow_run column from Migrate; records keep their workflow run, and
// Filter.WorkflowRun selects one run's item runs, every step's.
func TestWorkflowRunColumn(t *testing.T) {
	pool := newPool(t, integration.SharedPostgres(t))
	// The table as Migrate made it before workflows.
	if _, err := pool.Exec(t.Context(), `CREATE TABLE shardflow_history (job text NOT NULL, server text NOT NULL, item integer NOT NULL,
  epoch bigint NOT NULL, source text NOT NULL, begin_at timestamptz NOT NULL, end_at timestamptz NOT NULL,
  success bigint NOT NULL, failure bigint NOT NULL, error text NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO shardflow_history VALUES ('old', 'a', 0, 1, 'normal', now(), now(), 1, 0, '')`); err != nil {
		t.Fatal(err)
	}
	st := newStore(t, pghistory.Config{Pool: pool, Retention: -1})
	w1, w2 := run("a", 0, 1, history.SourceNormal, 0), run("b", 1, 1, history.SourceFailover, 1)
	w1.WorkflowRun, w2.WorkflowRun = "e-0000000001", "e-0000000001"
	w2.Job = "load"
	other := run("a", 0, 1, history.SourceNormal, 2)
	other.WorkflowRun = "e-0000000002"
	if err := st.Write(t.Context(), []history.Record{w1, w2, other, run("a", 1, 1, history.SourceManual, 3)}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Runs(t.Context(), history.Filter{WorkflowRun: "e-0000000001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != w2 || got[1] != w1 {
		t.Fatalf("runs of e-0000000001: %v, want the two written in it, newest first", describe(got))
	}
	all, err := st.Runs(t.Context(), history.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// The row from before the migration began now(): the newest.
	if n := len(all); n != 5 || all[0].Job != "old" || all[0].WorkflowRun != "" {
		t.Fatalf("all runs: %d, newest %s; want 5 with the pre-workflow row read with no workflow run", n, fmt.Sprint(all[0]))
	}
}

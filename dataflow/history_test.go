package dataflow

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/history"
)

// Every item run reaches NodeConfig.History with its source: a trigger is
// manual, a cron fire normal, the catch-up after missed fires misfire. The
// records carry the item's own counts and first error, and items without
// failure update the per-item last-success metric.
func TestNodeRecordsHistoryPerItem(t *testing.T) {
	mem := history.NewMemory(0)
	metrics := prometheus.NewRegistry()
	n, l := startNodeWithJob(t, NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "h-0", History: mem, Metrics: metrics},
		JobConfig{JobName: "h", ShardingTotalCount: 3, ErrorPolicy: ErrorPolicyIgnore}, failSome{})
	defer stopNode(t, n)
	if err := n.TriggerLocal("h"); err != nil {
		t.Fatal(err)
	}
	ev := l.next(t) // history is recorded before AfterRun
	recs := mem.All()
	if len(recs) != 3 {
		t.Fatalf("%d records for a 3-item run, want 3: %+v", len(recs), recs)
	}
	for _, r := range recs {
		wantS, wantF, wantErr := int64(1), int64(0), ""
		if r.Item == 2 {
			wantS, wantF, wantErr = 0, 1, errBoom.Error()
		}
		if r.Job != "h" || r.Server != "h-0" || r.Source != history.SourceManual || r.Epoch <= 0 ||
			r.Success != wantS || r.Failure != wantF || !strings.Contains(r.Error, wantErr) || (wantErr == "" && r.Error != "") {
			t.Errorf("record %+v; want job h, server h-0, source manual, epoch > 0, %d/%d, error %q", r, wantS, wantF, wantErr)
		}
		if r.Begin.Before(ev.info.Started) || r.End.Before(r.Begin) || r.End.After(ev.res.Started.Add(ev.res.Duration)) {
			t.Errorf("record %+v: begin/end outside the run %v + %v", r, ev.res.Started, ev.res.Duration)
		}
	}
	if got := gatherCount(t, metrics, "shardflow_item_last_success_timestamp_seconds"); got != 2 {
		t.Errorf("%d item last-success series, want 2 (items 0 and 1; item 2 failed)", got)
	}

	// A cron fire during a run: the run is normal, the catch-up misfire.
	gl := fireDuringRun(t, n, 1)
	gl.next(t)
	gl.next(t)
	slow, err := mem.Runs(t.Context(), history.Filter{Job: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if len(slow) != 2 || slow[0].Source != history.SourceMisfire || slow[1].Source != history.SourceNormal {
		t.Fatalf("records of the slow job (newest first) %+v; want a misfire run after a normal one", slow)
	}
}

// gatherCount returns how many series of the metric named name reg gathers.
func gatherCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

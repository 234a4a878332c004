package stats

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	col := NewCollector("srv-1")
	col.now = func() time.Time { return time.Unix(1700000000, 0) }
	var orders, users Counter
	orders.Add(10, 2)
	users.Add(1, 0)
	col.Track("orders", &orders)
	col.Track("users", &users)
	col.ObserveRun("orders", 300*time.Millisecond, nil)
	col.now = func() time.Time { return time.Unix(1700000060, 0) }
	col.ObserveRun("orders", 2*time.Hour, errors.New("boom"))

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP shardflow_items_processed_total Items processed by dataflow jobs on this server, by outcome.
# TYPE shardflow_items_processed_total counter
shardflow_items_processed_total{job="orders",result="failure",server="srv-1"} 2
shardflow_items_processed_total{job="orders",result="success",server="srv-1"} 10
shardflow_items_processed_total{job="users",result="failure",server="srv-1"} 0
shardflow_items_processed_total{job="users",result="success",server="srv-1"} 1
# HELP shardflow_last_run_timestamp_seconds Unix time at which the job's last run on this server ended.
# TYPE shardflow_last_run_timestamp_seconds gauge
shardflow_last_run_timestamp_seconds{job="orders",server="srv-1"} 1.70000006e+09
# HELP shardflow_last_success_timestamp_seconds Unix time at which the job's last run without error on this server ended; alert when it grows old.
# TYPE shardflow_last_success_timestamp_seconds gauge
shardflow_last_success_timestamp_seconds{job="orders",server="srv-1"} 1.7e+09
# HELP shardflow_runs_total Runs of dataflow jobs on this server, by outcome (failure: the run returned an error).
# TYPE shardflow_runs_total counter
shardflow_runs_total{job="orders",result="failure",server="srv-1"} 1
shardflow_runs_total{job="orders",result="success",server="srv-1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"shardflow_items_processed_total", "shardflow_runs_total",
		"shardflow_last_run_timestamp_seconds", "shardflow_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}

	// The histogram: 0.3 s falls in the 0.5 bucket, 2 h only in +Inf.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var checked bool
	for _, mf := range mfs {
		if mf.GetName() != "shardflow_run_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 2 || h.GetSampleSum() != 0.3+7200 {
			t.Errorf("histogram count %d sum %v, want 2 and 7200.3", h.GetSampleCount(), h.GetSampleSum())
		}
		for _, b := range h.GetBucket() {
			want := uint64(0)
			if b.GetUpperBound() >= 0.5 {
				want = 1
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("bucket le=%v has %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
		checked = true
	}
	if !checked {
		t.Fatal("shardflow_run_duration_seconds not gathered")
	}

	// Counts read at scrape time; a forgotten job disappears.
	orders.Add(5, 0)
	col.Forget("users")
	if n := testutil.CollectAndCount(col, "shardflow_items_processed_total"); n != 2 {
		t.Errorf("items series after Forget = %d, want 2", n)
	}
	want = `
# HELP shardflow_items_processed_total Items processed by dataflow jobs on this server, by outcome.
# TYPE shardflow_items_processed_total counter
shardflow_items_processed_total{job="orders",result="failure",server="srv-1"} 2
shardflow_items_processed_total{job="orders",result="success",server="srv-1"} 15
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shardflow_items_processed_total"); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorItemLastSuccess(t *testing.T) {
	col := NewCollector("srv-1")
	t0 := time.Unix(1700000000, 0)
	col.ObserveItem("orders", 3, t0, true)
	col.ObserveItem("orders", 3, t0.Add(-time.Minute), true) // older: ignored
	col.ObserveItem("orders", 1, t0.Add(time.Minute), false) // failed: no series
	col.ObserveItem("orders", 0, t0.Add(time.Second), true)
	want := `
# HELP shardflow_item_last_success_timestamp_seconds Unix time at which the shard item's last run on this server without a failure ended.
# TYPE shardflow_item_last_success_timestamp_seconds gauge
shardflow_item_last_success_timestamp_seconds{item="0",job="orders",server="srv-1"} 1.700000001e+09
shardflow_item_last_success_timestamp_seconds{item="3",job="orders",server="srv-1"} 1.7e+09
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "shardflow_item_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
	col.Forget("orders")
	if n := testutil.CollectAndCount(col, "shardflow_item_last_success_timestamp_seconds"); n != 0 {
		t.Fatalf("%d series after Forget, want 0", n)
	}
}

package dataflow

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

// Runs of every source reach a real Postgres through the Node's history
// buffer: a manual trigger, a cron fire (normal), the catch-up after fires
// missed during a run (misfire), and an item taken over (failover), each
// with its server and epoch.
func TestNodeHistoryOnPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, integration.SharedPostgres(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	buf, st, err := pghistory.NewBuffer(ctx, pghistory.Config{Pool: pool}, history.BufferConfig{FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = buf.Stop(context.Background()) }()

	n, l := startNodeWithJob(t, NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "server-0", History: buf}, JobConfig{JobName: "fo", ShardingTotalCount: 2}, &itemJob{})
	defer stopNode(t, n)
	// Manual.
	if err := n.TriggerLocal("fo"); err != nil {
		t.Fatal(err)
	}
	l.next(t)
	// Normal and misfire: a cron fire, and one during its run.
	gl := fireDuringRun(t, n, 1)
	gl.next(t)
	gl.next(t)
	// Failover: the Node records an item it took over (Shard.Failover) as
	// failover whatever started the run; the take-over itself is
	// TestNodeFailoverToIdleServer's (memstore).
	n.mu.Lock()
	h := n.jobs["fo"]
	n.mu.Unlock()
	n.report(h, RunInfo{JobName: "fo", ServerID: "server-0", Reason: ReasonCron, Items: []int{1}},
		RunResult{Items: []ItemResult{{Item: 1, Epoch: 7, Failover: true, Success: 1, Started: time.Now(), Duration: time.Millisecond}}}, nil)
	if err := buf.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	all, err := st.Runs(ctx, history.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range all {
		seen = append(seen, fmt.Sprintf("%s/%s/%s", r.Job, r.Server, r.Source))
		if r.Epoch <= 0 || r.End.Before(r.Begin) {
			t.Errorf("record %+v: want a positive epoch and end >= begin", r)
		}
	}
	if len(all) != 5 {
		t.Errorf("%d records, want 5 (manual for items 0 and 1, normal, misfire, failover): %v", len(all), seen)
	}
	for _, want := range []string{"fo/server-0/manual", "slow/server-0/normal", "slow/server-0/misfire", "fo/server-0/failover"} {
		if !slices.Contains(seen, want) {
			t.Errorf("no %s record in Postgres; have %v", want, seen)
		}
	}
}

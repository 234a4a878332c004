package postgres_test

import (
	"context"
	"testing"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/dataflow/dataflowtest"
	"github.com/shardflow/shardflow/sources/postgres"
)

// A job over a Postgres table, run once by dataflowtest: every row is
// done, claimed under the Node's one server id (Shard.ServerID; the source
// has no server id of its own).
func TestDataflowtestRunsAClaimJobOnATable(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	newOrders(t, pool, 40)
	job := newSource(t, pool, postgres.Config{}).Claim(func(context.Context, dataflowShard, Order) error { return nil })
	cfg := dataflow.JobConfig{JobName: "job", ShardingTotalCount: 4, FetchDataCount: 8, StreamingProcess: true}
	res, err := dataflowtest.RunBatch(ctx, cfg, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.Success != 40 || res.Failure != 0 || len(res.Items) != 4 {
		t.Fatalf("run: %d/%d over %d items; want 40/0 over 4", res.Success, res.Failure, len(res.Items))
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done' AND shardflow_claimed_by = $1`, dataflowtest.ServerID); n != 40 {
		t.Fatalf("rows done under server id %q = %d; want 40", dataflowtest.ServerID, n)
	}
}

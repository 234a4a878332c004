package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sources/postgres"
)

// Requeue runs beside a busy worker: it turns only failed rows back to
// pending, so no row is processed twice and every requeued row is
// processed once more.
func TestListAndRequeueFailedRowsWhileAWorkerRuns(t *testing.T) {
	pool := newDB(t)
	ctx := testCtx(t)
	const first, more = 300, 3000
	newOrders(t, pool, first)
	spec := postgres.TableSpec{Table: "orders"}
	var fixed atomic.Bool
	gate := make(chan struct{}) // holds the worker mid-batch during the requeues
	const held = first + more/2
	var mu sync.Mutex
	calls := map[int64]int{}
	src := newSource(t, pool, postgres.Config{MaxAttempts: 1})
	job := src.Claim(func(ctx context.Context, _ dataflowShard, o Order) error {
		mu.Lock()
		calls[o.ID]++
		mu.Unlock()
		if o.ID == held {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if o.ID%10 == 0 && o.ID <= first && !fixed.Load() {
			return fmt.Errorf("order %d: bad row", o.ID)
		}
		return nil
	})
	startNode(t, dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "w1"}, dataflow.JobConfig{JobName: "job", Cron: "* * * * * ?",
		ShardingTotalCount: 4, FetchDataCount: 50, ConcurrentDataProcessThreadCount: 2, StreamingProcess: true}, job)
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate() // before Stop, should the test fail while the worker is held
	testwait.For(t, 60*time.Second, "the first rows done or failed", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status IN ('done', 'failed')`) == first
	})
	failed, err := postgres.ListFailed(ctx, pool, spec, postgres.FailedFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != first/10 || failed[0].Key != 10 || failed[0].Attempts != 1 || failed[0].LastError != "order 10: bad row" || failed[0].FailedAt == nil {
		t.Fatalf("ListFailed = %d rows, first %+v; want %d, row 10 with 1 attempt, its error and when", len(failed), failed[0], first/10)
	}
	if got, err := postgres.ListFailed(ctx, pool, spec, postgres.FailedFilter{ErrorContains: "ORDER 20:"}, 0); err != nil || len(got) != 1 || got[0].Key != 20 {
		t.Fatalf("ListFailed by error text = %+v, %v; want row 20", got, err)
	}

	// New rows, plainly inserted; the worker is held processing one of them
	// (claimed, its batch in progress) while the requeues run.
	exec(t, pool, `INSERT INTO orders (id, payload) SELECT g, 'p' || g FROM generate_series($1::int, $2::int) g`, first+1, first+more)
	fixed.Store(true)
	testwait.For(t, 60*time.Second, "the worker holding a claim on a new row", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE id = $1 AND shardflow_status = 'claimed'`, held) == 1
	})
	n1, err := postgres.Requeue(ctx, pool, spec, postgres.FailedFilter{Keys: []int64{10, 20, 21}})
	if err != nil || n1 != 2 {
		t.Fatalf("Requeue by id = %d, %v; want 2 (21 is not failed)", n1, err)
	}
	n2, err := postgres.Requeue(ctx, pool, spec, postgres.FailedFilter{ErrorContains: "order 30:"})
	if err != nil || n2 != 1 {
		t.Fatalf("Requeue by error text = %d, %v; want 1 (row 30)", n2, err)
	}
	pendingDuring := queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status IN ('pending', 'claimed') AND id > $1`, first)
	n3, err := postgres.Requeue(ctx, pool, spec, postgres.FailedFilter{})
	if err != nil || n3 != first/10-3 {
		t.Fatalf("Requeue all = %d, %v; want %d", n3, err, first/10-3)
	}
	t.Logf("requeued %d+%d+%d rows while %d new rows were pending or claimed", n1, n2, n3, pendingDuring)
	if n := queryInt(t, pool, `SELECT count(*) FROM orders WHERE id = $1 AND shardflow_status = 'claimed'`, held); n != 1 {
		t.Fatal("the held row's claim changed during the requeues")
	}
	openGate()
	testwait.For(t, 60*time.Second, "every row done", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM orders WHERE shardflow_status = 'done'`) == first+more
	})
	mu.Lock()
	defer mu.Unlock()
	for id := int64(1); id <= first+more; id++ {
		want := 1
		if id%10 == 0 && id <= first {
			want = 2
		}
		if calls[id] != want {
			t.Fatalf("row %d processed %d times; want %d", id, calls[id], want)
		}
	}
	if _, err := postgres.Requeue(ctx, pool, postgres.TableSpec{Table: "orders", Bookkeeping: postgres.Bookkeeping{Status: "nope"}}, postgres.FailedFilter{}); !errors.Is(err, postgres.ErrMissingColumn) {
		t.Fatalf("Requeue with a wrong bookkeeping name: %v; want ErrMissingColumn", err)
	}
}

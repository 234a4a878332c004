package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/sources/postgres"
)

// A pgbatch run records its history in its own database by default: the
// successes recorded per item run add up to the rows it processed.
func TestWorkRecordsHistoryTotals(t *testing.T) {
	t.Parallel()
	const rows = 5000
	pg, zk := integration.SharedPostgres(t), integration.SharedZooKeeper(t)
	bin := integration.BuildBinary(t, "github.com/shardflow/shardflow/examples/pgbatch")
	dsn := pg.NewDatabase(t)
	if out, err := exec.Command(bin, "seed", "--pg", dsn, "--rows", strconv.Itoa(rows)).CombinedOutput(); err != nil {
		t.Fatalf("seed: %v\n%s", err, out)
	}
	ns := fmt.Sprintf("pgbatch-history-%d", time.Now().UnixNano())
	workers := make([]*integration.Process, 2)
	for i := range workers {
		// Without --follow a worker exits (flushing its history) once no
		// row is pending.
		workers[i] = integration.StartProcess(t, bin, []string{"work", "--pg", dsn, "--zk", zk.Servers()[0],
			"--server-id", fmt.Sprintf("h%d", i), "--namespace", ns, "--session-timeout", "4s"}, nil)
		// One join at a time: this test is about history, not join races.
		workers[i].RequireLine(t, "started", 60*time.Second)
	}
	for i, w := range workers {
		select {
		case <-w.Done():
		case <-time.After(120 * time.Second):
			t.Fatalf("worker h%d did not finish within 120s", i)
		}
		if code := w.ExitCode(); code != 0 {
			t.Fatalf("worker h%d exited %d", i, code)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := postgres.Connect(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r, err := verify(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, r, rows)
	var success, failure, runs int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(success), 0), coalesce(sum(failure), 0), count(*) FROM shardflow_history WHERE job = 'pgbatch'`).
		Scan(&success, &failure, &runs); err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %d item runs, %d successes, %d failures", runs, success, failure)
	if success != rows {
		t.Fatalf("history records %d successes, want the %d rows processed", success, rows)
	}
}

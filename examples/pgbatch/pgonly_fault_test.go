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

// TestFaultPostgresOnlyExactlyOnce runs the workers with Postgres as the
// only server (--coord is the data's own database: coord/pgstore, no
// ZooKeeper) through the fault suite's core cases: two SIGKILLs, a SIGSTOP
// past the session timeout, and a restart of Postgres. Every row is done
// exactly once, and every item runs again after the last fault.
func TestFaultPostgresOnlyExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.StartPostgres(t)
	pg.RequireControl(t)
	rows := faultRows() / 8
	c := &cluster{t: t, bin: integration.BuildBinary(t, "github.com/shardflow/shardflow/examples/pgbatch"),
		dsn: pg.NewDatabase(t), ns: fmt.Sprintf("pgonly-%d", time.Now().UnixNano()), pgOnly: true,
		workers: make([]*integration.Process, 3)}
	if out, err := exec.Command(c.bin, "seed", "--pg", c.dsn, "--rows", strconv.Itoa(rows)).CombinedOutput(); err != nil {
		t.Fatalf("seed: %v\n%s", err, out)
	}
	pool, err := postgres.Connect(context.Background(), c.dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for i := range c.workers {
		c.start(i)
	}
	step := 0
	lastFault := time.Now()
	r := waitDone(t, pool, 150*time.Second, func() {
		if time.Since(lastFault) < 2*time.Second {
			return
		}
		switch step {
		case 0, 1: // SIGKILL a worker and start another in its place
			if err := c.workers[step].Kill(); err != nil {
				t.Fatal(err)
			}
			c.start(step)
			t.Logf("killed worker %d", step)
		case 2: // SIGSTOP past the session timeout: it wakes up to a lost session
			w := c.workers[2]
			if err := w.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2*sessionTimeout + time.Second) // the fault is the elapsed time
			if err := w.Resume(); err != nil {
				t.Fatal(err)
			}
			t.Logf("paused and resumed worker 2 for %s", 2*sessionTimeout+time.Second)
		case 3: // restart the only server
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := pg.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := pg.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Log("Postgres restarted")
		default:
			return
		}
		step++
		lastFault = time.Now()
	})
	if step < 4 {
		t.Logf("the run finished after %d of 4 faults; raise SHARDFLOW_PGBATCH_ROWS", step)
	}
	checkExactlyOnce(t, r, rows)
	c.requireEveryItemRanSince(t, lastFault)
}

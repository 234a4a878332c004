package main

// FAULT SUITE: real ZooKeeper and Postgres (integration harness), pgbatch
// worker processes killed, paused past their session timeout, and a
// Postgres restart. SHARDFLOW_PGBATCH_ROWS overrides the 200k default.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/shardflow/shardflow/sources/postgres"
)

// TestMain runs the six tests at once (integration.DefaultParallel): each
// has its own database and namespace (and the restart test its own
// Postgres), and most of their time is the workers' and Postgres', not this
// process's.
func TestMain(m *testing.M) {
	integration.DefaultParallel(6)
	integration.Main(m)
}

const sessionTimeout = 4 * time.Second

func faultRows() int {
	if v, err := strconv.Atoi(os.Getenv("SHARDFLOW_PGBATCH_ROWS")); err == nil && v > 0 {
		return v
	}
	return 200_000
}

type cluster struct {
	t        *testing.T
	bin, dsn string
	zk, ns   string
	workers  []*integration.Process
	// pgOnly: the workers coordinate on Postgres (--coord DSN), with no
	// ZooKeeper.
	pgOnly bool
	// extra are more arguments of every worker's work command.
	extra []string
}

// coordSpec is the coordination store's setting: the ZooKeeper server, or
// the data's database when pgOnly.
func (c *cluster) coordSpec() string {
	if c.pgOnly {
		return c.dsn
	}
	return c.zk
}

func (c *cluster) start(i int) {
	c.startVia(i, c.dsn, c.coordSpec())
}

// startVia starts worker i on the data's database at dsn (a proxy, say)
// and coordination at coord. Its data connections carry the application
// name workerApp(i), so that a test finds its transactions in
// pg_stat_activity (midBatch).
func (c *cluster) startVia(i int, dsn, coord string) {
	c.t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		c.t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", workerApp(i))
	u.RawQuery = q.Encode()
	c.workers[i] = integration.StartProcess(c.t, c.bin, append([]string{"work", "--pg", u.String(), "--coord", coord,
		"--server-id", fmt.Sprintf("w%d", i), "--namespace", c.ns, "--follow",
		"--session-timeout", sessionTimeout.String()}, c.extra...), nil)
}

// workerApp is the application name of worker i's data connections.
func workerApp(i int) string { return fmt.Sprintf("pgbatch-w%d", i) }

func setupCluster(t *testing.T, pg *integration.Postgres, workers, rows int) (*cluster, *pgxpool.Pool) {
	t.Helper()
	c, pool := seedCluster(t, pg, workers, rows, false)
	for i := range workers {
		c.start(i)
	}
	return c, pool
}

// seedCluster builds the worker binary, seeds rows into a database of its
// own on pg and opens a pool on it; no worker is started. pgOnly: the
// workers coordinate on that database, with no ZooKeeper.
func seedCluster(t *testing.T, pg *integration.Postgres, workers, rows int, pgOnly bool) (*cluster, *pgxpool.Pool) {
	t.Helper()
	c := &cluster{t: t, bin: integration.BuildBinary(t, "github.com/shardflow/shardflow/examples/pgbatch"),
		dsn: pg.NewDatabase(t), ns: fmt.Sprintf("pgbatch-%s-%d", t.Name(), time.Now().UnixNano()),
		workers: make([]*integration.Process, workers), pgOnly: pgOnly}
	if !pgOnly {
		c.zk = integration.SharedZooKeeper(t).Servers()[0]
	}
	if out, err := exec.Command(c.bin, "seed", "--pg", c.dsn, "--rows", strconv.Itoa(rows)).CombinedOutput(); err != nil {
		t.Fatalf("seed: %v\n%s", err, out)
	}
	pool, err := postgres.Connect(context.Background(), c.dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return c, pool
}

// doneStall is how long waitDone lets the rows left stay unchanged: more
// than a worker's longest wait on a live system (a backoff step of at most
// 30 s after a Postgres restart, a session timeout, a reshard), far less
// than forever.
const doneStall = 2 * time.Minute

// waitDone waits for the state "no row pending" (anyPending, polled
// between calls of chaos), then verifies once. It fails when the work
// stalls: no row done for stall (the rows left, counted every few seconds,
// unchanged), not when it is slow. A bound on the whole work failed the
// Postgres-only fault tests at load 50+ ("not done within 2m30s"): midBatch
// finds its victim within seconds of a band's release, so most of the table
// is left after the last fault (about 19,000 of 25,000 rows), in 20-row
// batches each held open 200 ms: 25 s on an idle machine at best, 92 s at
// load 25-40 (every item advancing, none stalled), past the 150 s it had
// below 127 rows/s. Before that it
// polled verify itself, a read of both tables whole every half second
// beside the workers, which slowed the workers it waited for.
func waitDone(t *testing.T, pool *pgxpool.Pool, stall time.Duration, chaos func()) Report {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	start := time.Now()
	left, movedAt, countAt := int64(-1), start, time.Time{}
	err := testwait.Poll(ctx, func(ctx context.Context) error {
		qctx, qcancel := context.WithTimeout(ctx, 20*time.Second)
		defer qcancel()
		pending, err := anyPending(qctx, pool)
		if err == nil && !pending {
			return nil
		}
		if chaos != nil {
			chaos()
		}
		if now := time.Now(); now.Sub(countAt) >= 5*time.Second {
			countAt = now
			if n, cerr := rowsLeft(qctx, pool); cerr == nil && n != left {
				left, movedAt = n, now
			}
			if now.Sub(movedAt) > stall {
				cancel(fmt.Errorf("stalled: %d rows left, none done for %s (%s in all)", left, now.Sub(movedAt).Round(time.Second), now.Sub(start).Round(time.Second)))
			}
		}
		if err != nil {
			return err
		}
		return errors.New("rows pending")
	})
	// One read of both tables, for the verdict or for the failure's
	// figures; its bound catches a hang, not a slow machine.
	vctx, vcancel := context.WithTimeout(context.Background(), time.Minute)
	defer vcancel()
	vstart := time.Now()
	r, verr := verify(vctx, pool)
	t.Logf("done in %s; verify read both tables in %s", vstart.Sub(start).Round(time.Second), time.Since(vstart).Round(time.Millisecond))
	switch {
	case err != nil:
		t.Fatalf("not done: %v: %v; %+v (verify error: %v)", context.Cause(ctx), err, r, verr)
	case verr != nil:
		t.Fatalf("no row pending, then %v", verr)
	}
	return r
}

// rowsLeft counts the rows pending or claimed, by the queue index
// (Migrate's partial index on exactly these statuses): waitDone's measure
// of progress, read every few seconds.
func rowsLeft(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pgbatch_source WHERE shardflow_status IN ('pending', 'claimed')`).Scan(&n)
	return n, err
}

func checkExactlyOnce(t *testing.T, r Report, rows int) {
	t.Helper()
	t.Logf("verify: %+v", r)
	if r.Rows != int64(rows) || r.Done != int64(rows) || r.Failed != 0 || r.Lost != 0 || r.DuplicateEffects != 0 || r.OrphanEffects != 0 || r.BusinessWrites != 0 {
		t.Fatalf("verify = %+v; want all %d rows done, 0 failed, 0 lost, 0 duplicate effects, 0 orphan effects, 0 business writes", r, rows)
	}
}

// requireEveryItemRanSince is the suite's closing liveness check: after
// the last fault (since), every enabled item of the job begins again (its
// lastBeginTime in the coordination status), not only every row done: an
// item stuck after the faults (a failover claim no run takes) whose rows
// were all processed before would pass waitDone.
func (c *cluster) requireEveryItemRanSince(t *testing.T, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := connect.Open(ctx, connect.Config{Coord: c.coordSpec(), SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("open a session on %s: %v", connect.Describe(c.coordSpec()), err)
	}
	defer func() { _ = st.Close() }()
	admin := coord.NewAdmin(st, c.ns)
	testwait.ForNoError(t, 60*time.Second, "every item begun again after the last fault", func() error {
		js, err := admin.Status(ctx, "pgbatch")
		if err != nil {
			return err
		}
		if len(js.Items) == 0 {
			return fmt.Errorf("no items in the status")
		}
		for _, is := range js.Items {
			if !is.Disabled && (is.LastBeginTime == nil || !is.LastBeginTime.After(since)) {
				return fmt.Errorf("item %d last begun at %v, not after %v", is.Item, is.LastBeginTime, since)
			}
		}
		return nil
	})
}

func TestFaultKillPauseExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	rows := faultRows()
	c, pool := setupCluster(t, integration.SharedPostgres(t), 3, rows)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("chaos seed %d", seed)
	// The chaos is bounded: maxKills kills 3 s apart and one pause, then
	// the workers finish. Killing every 3 s for as long as rows remained
	// made the test a race between that fixed rate and recovery, which
	// slows with the machine's load (not done within 2m30s, 172,055 rows
	// of 200,000, 1 run in 3 at load 40-60).
	const maxKills = 8
	kills, paused := 0, false
	lastKill := time.Now()
	lastFault := time.Now()
	r := waitDone(t, pool, doneStall, func() {
		if !paused && kills >= 2 {
			// SIGSTOP one worker past its session timeout, then SIGCONT it:
			// it wakes up believing it owns items it lost.
			paused = true
			w := c.workers[rng.IntN(len(c.workers))]
			if err := w.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2*sessionTimeout + time.Second) // the fault is the elapsed time
			if err := w.Resume(); err != nil {
				t.Fatal(err)
			}
			t.Logf("paused and resumed pid %d for %s", w.Pid(), 2*sessionTimeout+time.Second)
			lastFault = time.Now()
			return
		}
		if kills < maxKills && time.Since(lastKill) > 3*time.Second {
			i := rng.IntN(len(c.workers))
			if err := c.workers[i].Kill(); err != nil {
				t.Fatal(err)
			}
			c.start(i)
			kills++
			lastKill = time.Now()
			lastFault = lastKill
		}
	})
	t.Logf("%d kills, pause done %v", kills, paused)
	if kills < 2 {
		t.Logf("the run finished before the chaos did much: %d kills; raise SHARDFLOW_PGBATCH_ROWS", kills)
	}
	checkExactlyOnce(t, r, rows)
	c.requireEveryItemRanSince(t, lastFault)
}

// TestFaultPostgresRestartLosesNothing restarts Postgres (the data; the
// coordination on ZooKeeper) while a worker holds a batch's transaction
// open (midBatch), the second half of the rows held back (rowGate) until
// then, so that the run cannot finish first.
func TestFaultPostgresRestartLosesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.StartPostgres(t)
	pg.RequireControl(t)
	rows := faultRows() / 2
	c, pool := seedCluster(t, pg, 2, rows, false)
	lo, hi := band(1, 2, rows)
	gate := holdRows(t, c.dsn, lo, hi)
	for i := range c.workers {
		c.start(i)
	}
	lo0, hi0 := band(0, 2, rows)
	open := c.midBatch(t, pool, "Postgres restart", []int{0, 1}, lo0, hi0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range c.workers {
		if err := w.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("Postgres restarted, with %d batch transactions of the workers open", open)
	gate.release() // released by the restart already
	r := waitDone(t, pool, doneStall, nil)
	checkExactlyOnce(t, r, rows)
	c.requireEveryItemRanSince(t, restarted)
}

// A worker started while Postgres is down waits for it, saying so, instead
// of exiting (a worker starting beside a Postgres restart used to die on
// its first start-up query, and its items waited for a failover that never
// came: CI, 2026-11-26); once Postgres is back it processes every row.
func TestFaultWorkerStartedWhilePostgresIsDownWaits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.StartPostgres(t)
	pg.RequireControl(t)
	rows := 2000
	c, pool := setupCluster(t, pg, 0, rows)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c.workers = append(c.workers, nil)
	c.start(0)
	c.workers[0].RequireLine(t, `Postgres unreachable; trying again.*step=connect`, 60*time.Second)
	select {
	case <-c.workers[0].Done():
		t.Fatalf("the worker exited while Postgres was down (exit code %d)", c.workers[0].ExitCode())
	default:
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	checkExactlyOnce(t, waitDone(t, pool, doneStall, nil), rows)
	c.requireEveryItemRanSince(t, up)
}

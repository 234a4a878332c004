package main

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// The Postgres-only fault tests place each fault on a state, not a delay:
// a fault hits its victims while one of them holds a batch's transaction
// open (rows marked done, its effects written, not committed: midBatch
// finds it in pg_stat_activity with the victims stopped by SIGSTOP, so it
// cannot commit between the look and the fault), and the rows the later
// faults need are held back until then (rowGate), so that the run cannot
// finish first. A fault that finds no victim mid-batch before its rows are
// done fails the test.

// slowBatches are the workers' arguments of the Postgres-only fault tests:
// 20-row batches, each transaction held open 200 ms (at most 100 rows a
// second per item and thread, so 5,000 rows take 3 s or more however idle
// the machine) so that the victims are mid-batch most of the time.
var slowBatches = []string{"--batch", "20", "--batch-delay", "200ms"}

// rowGate holds the rows with ids in (lo, hi] locked (SELECT ... FOR
// UPDATE) in a transaction of its own: the transactional mode skips locked
// rows (FOR UPDATE SKIP LOCKED), so they stay pending until release.
type rowGate struct {
	conn   *pgx.Conn
	tx     pgx.Tx
	lo, hi int64
}

// holdRows locks the rows with ids in (lo, hi] until release (or the end
// of t).
func holdRows(t *testing.T, dsn string, lo, hi int64) *rowGate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	g := &rowGate{conn: conn, lo: lo, hi: hi}
	t.Cleanup(g.release)
	if g.tx, err = conn.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.tx.Exec(ctx, `SELECT 1 FROM pgbatch_source WHERE id > $1 AND id <= $2 FOR UPDATE`, lo, hi); err != nil {
		t.Fatalf("lock rows (%d, %d]: %v", lo, hi, err)
	}
	return g
}

// release lets the workers take the rows (a Postgres restart has already
// released them: the errors of a dead connection are ignored).
func (g *rowGate) release() {
	if g.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.tx.Rollback(ctx)
	_ = g.conn.Close(ctx)
	g.conn = nil
}

// band returns the ids (lo, hi] of band k of n over rows 1..rows (the
// seeded ids: consecutive ids fall in consecutive buckets, so a band spans
// every item).
func band(k, n, rows int) (lo, hi int64) {
	return int64(k * rows / n), int64((k + 1) * rows / n)
}

// undone counts the rows with ids in (lo, hi] not done yet.
func undone(ctx context.Context, pool *pgxpool.Pool, lo, hi int64) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pgbatch_source WHERE id > $1 AND id <= $2 AND shardflow_status <> 'done'`, lo, hi).Scan(&n)
	return n, err
}

// midBatch stops the workers victims (SIGSTOP) until one of them is seen
// holding a batch's transaction open: a transaction of its data
// connections (workerApp) that has written (backend_xid), i.e. locked and
// marked rows done and not committed them. It returns how many such
// transactions it saw, with the victims still stopped: the caller's fault
// hits them mid-batch, and resumes them. Between looks the victims run
// again. It fails the test when the rows in (lo, hi] are all done first
// (the fault would come after the work) or after 2 minutes.
func (c *cluster) midBatch(t *testing.T, pool *pgxpool.Pool, fault string, victims []int, lo, hi int64) int {
	t.Helper()
	apps := make([]string, len(victims))
	for i, v := range victims {
		apps[i] = workerApp(v)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, v := range victims {
			if err := c.workers[v].Pause(); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var open int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = ANY($1) AND backend_xid IS NOT NULL`, apps).Scan(&open)
		if err == nil && open > 0 {
			cancel()
			return open
		}
		for _, v := range victims {
			if err := c.workers[v].Resume(); err != nil {
				t.Fatal(err)
			}
		}
		left, uerr := undone(ctx, pool, lo, hi)
		cancel()
		switch {
		case uerr == nil && left == 0:
			t.Fatalf("%s: every row of (%d, %d] was done before a victim (%v) was seen mid-batch: the fault would have come after the work", fault, lo, hi, apps)
		case time.Now().After(deadline):
			t.Fatalf("%s: no victim (%v) seen mid-batch in 2 minutes (last errors: %v, %v; rows of (%d, %d] not done: %d)", fault, apps, err, uerr, lo, hi, left)
		}
		time.Sleep(50 * time.Millisecond) // polling the victims' transactions
	}
}

// TestFaultPostgresOnlyExactlyOnce runs the workers with Postgres as the
// only server (--coord is the data's own database: coord/pgstore, no
// ZooKeeper) through the fault suite's core cases: two SIGKILLs, a SIGSTOP
// past the session timeout, and a restart of Postgres. The rows are seeded
// in five bands, bands 1-4 held back (rowGate) until the fault before them
// is done; fault k hits its victims mid-batch (midBatch) while band k is
// being worked. Every row is done exactly once, and every item runs again
// after the last fault.
func TestFaultPostgresOnlyExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.StartPostgres(t)
	pg.RequireControl(t)
	rows := faultRows() / 8
	c, pool := seedCluster(t, pg, 3, rows, true)
	c.extra = slowBatches
	const bands = 5
	gates := make([]*rowGate, bands)
	for k := 1; k < bands; k++ {
		lo, hi := band(k, bands, rows)
		gates[k] = holdRows(t, c.dsn, lo, hi)
	}
	for i := range c.workers {
		c.start(i)
	}
	faults := []struct {
		name    string
		victims []int
		hit     func() // with the victims stopped mid-batch
	}{
		{"SIGKILL w0", []int{0}, func() { c.kill(t, 0) }},
		{"SIGKILL w1", []int{1}, func() { c.kill(t, 1) }},
		{"SIGSTOP w2 past the session timeout", []int{2}, func() {
			time.Sleep(2*sessionTimeout + time.Second) // the fault is the elapsed time
			if err := c.workers[2].Resume(); err != nil {
				t.Fatal(err)
			}
		}},
		{"Postgres restarted", []int{0, 1, 2}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := pg.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range c.workers {
				if err := c.workers[i].Resume(); err != nil {
					t.Fatal(err)
				}
			}
			if err := pg.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	var lastFault time.Time
	for k, f := range faults {
		if gates[k] != nil {
			gates[k].release()
		}
		lo, hi := band(k, bands, rows)
		open := c.midBatch(t, pool, f.name, f.victims, lo, hi)
		f.hit()
		lastFault = time.Now()
		t.Logf("fault %d: %s, with %d batch transactions of the victims open (rows (%d, %d] being worked)", k+1, f.name, open, lo, hi)
	}
	gates[bands-1].release()
	r := waitDone(t, pool, doneStall, nil)
	checkExactlyOnce(t, r, rows)
	c.requireEveryItemRanSince(t, lastFault)
}

// kill SIGKILLs worker i and starts another in its place.
func (c *cluster) kill(t *testing.T, i int) {
	t.Helper()
	if err := c.workers[i].Kill(); err != nil {
		t.Fatal(err)
	}
	c.start(i)
}

// TestFaultPostgresOnlyNetworkCut cuts the network between one worker and
// its only server (Postgres: data and coordination, reached through a
// fault proxy) for longer than the session timeout, then heals it. The cut
// comes while the worker holds a batch's transaction open (midBatch), and
// the last rows are held back (rowGate) until the heal, so the run cannot
// finish first. The worker's session expires on the database's clock, its
// items go to the others, and the batch it had begun cannot commit (its
// fence is checked in its own transaction, on the far side of the cut);
// after the heal it opens a new session and works again. Every row is done
// exactly once, every worker stays alive, and every item begins again
// after the heal.
func TestFaultPostgresOnlyNetworkCut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.SharedPostgres(t)
	rows := faultRows() / 8
	c, pool := seedCluster(t, pg, 3, rows, true)
	c.extra = slowBatches
	lo, hi := band(1, 2, rows)
	gate := holdRows(t, c.dsn, lo, hi)
	u, err := url.Parse(c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := integration.NewProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr()
	c.start(0)
	c.start(1)
	// w2 reaches its only server, for its data and its coordination,
	// through the proxy.
	c.startVia(2, viaProxy.String(), viaProxy.String())
	c.requireServerHoldsItems(t, "w2")
	lo0, hi0 := band(0, 2, rows)
	open := c.midBatch(t, pool, "network cut of w2", []int{2}, lo0, hi0)
	proxy.Cut()
	if err := c.workers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*sessionTimeout + time.Second) // the fault is the elapsed time
	proxy.Restore()
	healed := time.Now()
	t.Logf("cut w2 from Postgres for %s, with %d of its batch transactions open", 2*sessionTimeout+time.Second, open)
	gate.release()
	r := waitDone(t, pool, doneStall, nil)
	checkExactlyOnce(t, r, rows)
	c.requireEveryItemRanSince(t, healed)
	c.requireServerHoldsItems(t, "w2")
	for i, w := range c.workers {
		select {
		case <-w.Done():
			t.Errorf("worker w%d exited (code %d)", i, w.ExitCode())
		default:
		}
	}
}

// requireServerHoldsItems waits until server is online in the job's status
// with items of its own (back in the sharding after a fault).
func (c *cluster) requireServerHoldsItems(t *testing.T, server string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := connect.Open(ctx, connect.Config{Coord: c.coordSpec(), SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("open a session on %s: %v", connect.Describe(c.coordSpec()), err)
	}
	defer func() { _ = st.Close() }()
	admin := coord.NewAdmin(st, c.ns)
	testwait.ForNoError(t, 60*time.Second, server+" online with items again", func() error {
		js, err := admin.Status(ctx, "pgbatch")
		if err != nil {
			return err
		}
		for _, s := range js.Servers {
			if s.ID == server {
				if s.Status == "OFFLINE" || len(s.Sharding) == 0 {
					return fmt.Errorf("%s is %s with items %v", server, s.Status, s.Sharding)
				}
				return nil
			}
		}
		return fmt.Errorf("%s not in the status", server)
	})
}

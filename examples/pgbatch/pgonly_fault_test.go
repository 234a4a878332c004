package main

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
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
	c, pool := seedCluster(t, pg, 3, rows, true)
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

// TestFaultPostgresOnlyNetworkCut cuts the network between one worker and
// its only server (Postgres: data and coordination, reached through a
// fault proxy) for longer than the session timeout, then heals it. The
// worker's session expires on the database's clock, its items go to the
// others, and a batch it had begun cannot commit (its fence is checked in
// its own transaction, on the far side of the cut); after the heal it
// opens a new session and works again. Every row is done exactly once,
// every worker stays alive, and every item begins again after the heal.
func TestFaultPostgresOnlyNetworkCut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	pg := integration.SharedPostgres(t)
	rows := faultRows() / 4
	c, pool := seedCluster(t, pg, 3, rows, true)
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
	c.workers[2] = integration.StartProcess(t, c.bin, []string{"work", "--pg", viaProxy.String(), "--coord", viaProxy.String(),
		"--server-id", "w2", "--namespace", c.ns, "--follow", "--session-timeout", sessionTimeout.String()}, nil)
	// The cut comes once w2 holds items (a state, not a delay: 3 s after
	// the start, a quiet machine had done every row before the cut).
	c.requireServerHoldsItems(t, "w2")
	cut := false
	var healed time.Time
	r := waitDone(t, pool, 150*time.Second, func() {
		if cut {
			return
		}
		cut = true
		proxy.Cut()
		time.Sleep(2*sessionTimeout + time.Second) // the fault is the elapsed time
		proxy.Restore()
		healed = time.Now()
		t.Logf("cut w2 from Postgres for %s", 2*sessionTimeout+time.Second)
	})
	if !cut {
		t.Fatal("the run finished before the cut; raise SHARDFLOW_PGBATCH_ROWS")
	}
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

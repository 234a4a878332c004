package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestServerIdentity: the two ways docs/kubernetes.md gives pods their
// server ids, on real ZooKeeper and Postgres with worker processes.
// StatefulSet (stable ids): a pod stopped and started again under its id,
// and one killed and started again at once (its join waits for the dead
// session), rejoin cleanly: one server node per id, live, with items.
// Deployment (a new id per pod): a killed pod replaced under a new id leaves
// no ghost: once its session is gone its node is OFFLINE with no items and
// the live servers own every item, and after the workers'
// --offline-server-grace (dataflow.NodeConfig.OfflineServerGrace) the
// leader prunes it: status no longer lists it. The work is still done
// exactly once.
func TestServerIdentity(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	const (
		rows = 20_000
		// grace is short so that the test sees the pruning; the
		// StatefulSet restarts below come back within it or are pruned
		// and join afresh, both clean.
		grace = 3 * time.Second
	)
	c, pool := setupCluster(t, integration.SharedPostgres(t), 0, rows)
	st, err := zkstore.Open(t.Context(), zkstore.Config{Servers: []string{c.zk}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := coord.NewAdmin(st, c.ns)
	start := func(id string) *integration.Process {
		p := integration.StartProcess(t, c.bin, []string{"work", "--pg", c.dsn, "--zk", c.zk, "--server-id", id,
			"--namespace", c.ns, "--follow", "--session-timeout", sessionTimeout.String(), "--offline-server-grace", grace.String()}, nil)
		p.RequireLine(t, "work "+id+": started", 60*time.Second)
		return p
	}
	// settled waits until exactly live are online, each with items that
	// together cover the job, no reshard pending, and every other server
	// node OFFLINE with no items.
	settled := func(what string, live ...string) {
		t.Helper()
		testwait.ForNoError(t, 60*time.Second, what, func() error {
			s, err := admin.Status(context.Background(), "pgbatch")
			if err != nil {
				return err
			}
			if s.ReshardingPending {
				return fmt.Errorf("resharding pending")
			}
			covered, seen := 0, map[string]int{}
			for _, srv := range s.Servers {
				seen[srv.ID]++
				if slices.Contains(live, srv.ID) {
					if srv.Status == "OFFLINE" || len(srv.Sharding) == 0 {
						return fmt.Errorf("%s: %s with items %v, want online with items", srv.ID, srv.Status, srv.Sharding)
					}
					covered += len(srv.Sharding)
				} else if srv.Status != "OFFLINE" || len(srv.Sharding) != 0 {
					return fmt.Errorf("ghost %s: %s with items %v, want OFFLINE with none", srv.ID, srv.Status, srv.Sharding)
				}
			}
			for _, id := range live {
				if seen[id] != 1 {
					return fmt.Errorf("server %s listed %d times", id, seen[id])
				}
			}
			if covered != len(s.Items) {
				return fmt.Errorf("the live servers own %d of %d items", covered, len(s.Items))
			}
			return nil
		})
	}

	s0, s1 := start("s-0"), start("s-1")
	defer s0.Kill()
	settled("s-0 and s-1 sharing the items", "s-0", "s-1")

	// StatefulSet, graceful: the same id back.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s1.Stop(ctx); err != nil {
		t.Fatalf("SIGTERM s-1: %v", err)
	}
	s1 = start("s-1")
	settled("s-1 rejoined under its id after a graceful stop", "s-0", "s-1")

	// StatefulSet, crash: started again at once under the same id.
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	s1 = start("s-1")
	settled("s-1 rejoined under its id after a crash", "s-0", "s-1")

	// Deployment, crash: the pod replaced under a new id.
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	d2 := start("d-2")
	defer d2.Kill()
	settled("s-1 gone (OFFLINE, no items) and d-2 in its place", "s-0", "d-2")
	// No ghost: the leader prunes s-1's node once it has been offline for
	// the grace (it went offline a session timeout after the kill).
	testwait.ForNoError(t, 60*time.Second, "s-1 pruned from status", func() error {
		s, err := admin.Status(context.Background(), "pgbatch")
		if err != nil {
			return err
		}
		for _, srv := range s.Servers {
			if srv.ID == "s-1" {
				return fmt.Errorf("s-1 still listed: %s with items %v", srv.Status, srv.Sharding)
			}
		}
		return nil
	})
	if since := time.Since(killed); since < grace {
		t.Errorf("s-1 pruned %s after its kill, before the grace %s", since, grace)
	}
	settled("s-0 and d-2 own every item after the pruning", "s-0", "d-2")

	checkExactlyOnce(t, waitDone(t, pool, doneStall, nil), rows)
}

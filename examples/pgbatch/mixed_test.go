package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// previousVersion is the revision TestMixedVersions runs beside the
// current code: v0.1.0, the first release (coordination layout 2). When a
// release is cut, name its commit here; a change of the layout or of the
// wire then ships with this test passing against it, or with a refusal it
// checks.
const previousVersion = "1a36dde21f0e3423f7974ff67fc1a4ce5b238f6c"

// TestMixedVersions: a fleet of pgbatch workers where one runs the
// previous version (built from its git revision by the harness) and two
// the current code shares the job: all three own items, and the work is
// done exactly once, through a replacement of the old worker by a current
// one (the last step of an upgrade). SHARDFLOW_MIXED_REV names another
// revision.
func TestMixedVersions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault suite")
	}
	rev := previousVersion
	if v := os.Getenv("SHARDFLOW_MIXED_REV"); v != "" {
		rev = v
	}
	oldBin, commit := integration.BuildBinaryAt(t, rev, "./examples/pgbatch")
	const rows = 20_000
	c, pool := setupCluster(t, integration.SharedPostgres(t), 0, rows)
	st, err := zkstore.Open(t.Context(), zkstore.Config{Servers: []string{c.zk}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := coord.NewAdmin(st, c.ns)
	start := func(bin, id string) *integration.Process {
		p := integration.StartProcess(t, bin, []string{"work", "--pg", c.dsn, "--zk", c.zk, "--server-id", id,
			"--namespace", c.ns, "--follow", "--session-timeout", sessionTimeout.String()}, nil)
		p.RequireLine(t, "work "+id+": started", 60*time.Second)
		return p
	}
	owning := func(what string, ids ...string) {
		t.Helper()
		testwait.ForNoError(t, 60*time.Second, what, func() error {
			s, err := admin.Status(context.Background(), "pgbatch")
			if err != nil {
				return err
			}
			for _, srv := range s.Servers {
				if slices.Contains(ids, srv.ID) && (srv.Status == "OFFLINE" || len(srv.Sharding) == 0) {
					return fmt.Errorf("%s: %s with items %v", srv.ID, srv.Status, srv.Sharding)
				}
			}
			if s.ReshardingPending {
				return fmt.Errorf("resharding pending")
			}
			return nil
		})
	}
	old := start(oldBin, "old")
	n1, n2 := start(c.bin, "new-1"), start(c.bin, "new-2")
	defer n1.Kill()
	defer n2.Kill()
	owning(fmt.Sprintf("the worker of %.12s and two of this code sharing the items", commit), "old", "new-1", "new-2")

	// The upgrade's last step: the old worker replaced by a current one.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := old.Stop(ctx); err != nil {
		t.Fatalf("SIGTERM the worker of %.12s: %v", commit, err)
	}
	n3 := start(c.bin, "new-3")
	defer n3.Kill()
	owning("three current workers", "new-1", "new-2", "new-3")
	checkExactlyOnce(t, waitDone(t, pool, doneStall, nil), rows)
	var failoverRuns int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM shardflow_history WHERE source = 'failover'`).Scan(&failoverRuns); err != nil {
		t.Fatal(err)
	}
	if failoverRuns != 0 {
		t.Fatalf("%d failover runs in a fleet of versions %.12s and current with no crash", failoverRuns, commit)
	}
}

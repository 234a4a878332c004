package faults

import (
	"context"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// settle is how long a membership change may take to show up as a new,
// disjoint sharding in status: the next trigger (1s cron) plus resharding
// plus, after a crash, the session timeout and ZooKeeper's expiry tick.
const settle = 20 * time.Second

// TestMembership: three worker processes of one job own disjoint items that
// together are exactly 0..n-1; a fourth joins -> resharding at the next
// trigger; one stops cleanly (SIGTERM) -> resharding; one is killed with
// SIGKILL -> after the session timeout the rest own every item; ZooKeeper is
// stopped and started again with its data -> the workers reconnect and go on
// (new begins after the restart, no worker exited).
func TestMembership(t *testing.T) {
	t.Parallel()
	zk := integration.StartZooKeeper(t)
	zk.RequireControl(t)
	c := newCluster(t, zk.Servers(), 8)

	t0 := time.Now()
	w1, w2, w3 := c.start("w1"), c.start("w2"), c.start("w3")
	c.requireOwnership(settle, "w1", "w2", "w3")
	c.log.waitFor(t, settle, "every item begun", allBegunSince(t0, c.total))

	// A fourth joins.
	joined := time.Now()
	w4 := c.start("w4")
	c.requireOwnership(settle, "w1", "w2", "w3", "w4")
	c.log.waitFor(t, settle, "every item begun after w4 joined", allBegunSince(joined, c.total))
	c.log.waitFor(t, settle, "w4 begins items", func(evs []Event) bool {
		return len(filter(evs, func(e Event) bool { return e.Server == "w4" && e.Ev == "begin" && e.T > joined.UnixMilli() })) > 0
	})

	// One stops cleanly.
	w2.term(t, 30*time.Second)
	stopped := time.Now()
	c.requireOwnership(settle, "w1", "w3", "w4")
	c.log.waitFor(t, settle, "every item begun by the rest after w2 stopped",
		allBegunSince(stopped, c.total, "w1", "w3", "w4"))

	// One is killed.
	killed := w3.kill()
	w3.wait()
	c.requireOwnership(sessionTimeout+settle, "w1", "w4")
	st := c.status(10 * time.Second)
	t.Logf("after SIGKILL of w3 the rest own every item %v after the kill: %s", time.Since(killed).Round(time.Millisecond), describeStatus(st))
	c.log.waitFor(t, settle, "every item begun by w1 and w4 after the kill",
		allBegunSince(killed, c.total, "w1", "w4"))

	// ZooKeeper stopped and started again with its data.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := zk.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if err := zk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	t.Logf("ZooKeeper was down for %v", up.Sub(down).Round(time.Millisecond))
	c.log.waitFor(t, 60*time.Second, "every item begun after ZooKeeper came back", allBegunSince(up, c.total, "w1", "w4"))
	for _, w := range []*worker{w1, w4} {
		if w.exited() {
			t.Fatalf("worker %s exited after the ZooKeeper restart: %v\n%s", w.id, w.exitErr(), w.stderrTail())
		}
	}
	c.checkInvariants("w1", "w4")
}

// TestEnsembleMemberDown: with three workers on a three-node ensemble, one
// ZooKeeper member stopped -> work goes on: every item is begun again while
// the member is down, and ownership stays disjoint and complete.
func TestEnsembleMemberDown(t *testing.T) {
	t.Parallel()
	ens := integration.StartEnsemble(t, 3)
	ens.RequireControl(t)
	c := newCluster(t, ens.Servers(), 8)
	c.start("w1")
	c.start("w2")
	c.start("w3")
	c.requireOwnership(settle, "w1", "w2", "w3")

	// Stop the member that is the quorum's leader when one can tell: the
	// harder case, since followers must elect a new one.
	victim := 0
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, addr := range ens.Servers() {
		if mode, err := integration.ServerMode(ctx, addr); err == nil && mode == "leader" {
			victim = i
		}
	}
	if err := ens.StopMember(ctx, victim); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("stopped ensemble member %d (%s)", victim, ens.Servers()[victim])
	c.log.waitFor(t, 60*time.Second, "every item begun with one member down", allBegunSince(stopped, c.total))
	// Work goes on: the sessions may have expired during the quorum's
	// re-election, so wait for fenced commits on every item, not only begins.
	c.log.waitFor(t, 60*time.Second, "every item committed with one member down", allCommittedSince(stopped, c.total))
	c.requireOwnership(settle, "w1", "w2", "w3")
	c.checkInvariants("w1", "w2", "w3")
}

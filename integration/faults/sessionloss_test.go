package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// TestPausePastSessionTimeout: SIGSTOP a worker past the session timeout,
// then SIGCONT: a process paused past its session timeout commits nothing
// once it has lost ownership — in the ledger, no commit under its old
// epochs is accepted after the new owner's first accepted commit (and no
// fencing check of it passes after the new owner began) — and the worker
// re-registers and works again (it never shuts down for good).
func TestPausePastSessionTimeout(t *testing.T) {
	t.Parallel()
	zk := integration.StartZooKeeper(t)
	// Long streaming runs, so the paused worker is mid-run, holding items
	// with uncommitted work, when it is frozen and when it is thawed.
	c := newCluster(t, zk.Servers(), 6, "--failover", "--streaming", "--run", "3s", "--process-delay", "50ms")
	c.start("w1")
	c.start("w2")
	w3 := c.start("w3")
	c.requireOwnership(settle, "w1", "w2", "w3")
	c.log.waitFor(t, settle, "w3 committing", func(evs []Event) bool {
		return len(filter(evs, func(e Event) bool { return e.Server == "w3" && e.Ev == "commit" })) > 0
	})

	paused := w3.pause()
	// The fault under test is the freeze itself: it lasts until the others
	// own and have begun all of w3's items (past the session timeout),
	// which is awaited rather than slept.
	c.requireOwnership(settle, "w1", "w2")
	c.log.waitFor(t, settle, "every item begun by w1 and w2 while w3 is frozen", allBegunSince(paused, c.total, "w1", "w2"))
	frozenFor := time.Since(paused)
	resumed := w3.resume()
	t.Logf("w3 frozen for %v (session timeout %v)", frozenFor.Round(time.Millisecond), sessionTimeout)

	c.requireOwnership(settle, "w1", "w2", "w3")
	c.log.waitFor(t, settle, "w3 begins and commits again after SIGCONT", func(evs []Event) bool {
		begun := map[int]int64{}
		for _, e := range evs {
			if e.Server != "w3" || e.T <= resumed.UnixMilli() {
				continue
			}
			if e.Ev == "begin" {
				begun[e.ItemNo()] = e.Epoch
			}
			if e.Ev == "commit" && begun[e.ItemNo()] == e.Epoch {
				return true
			}
		}
		return false
	})
	if w3.exited() {
		t.Fatalf("w3 exited after SIGCONT: %v", w3.exitErr())
	}
	c.requireEveryItemRanAgain(resumed)
	var fenced int
	for _, e := range c.log.all() {
		if e.Server == "w3" && e.Ev == "fenced" && e.T >= resumed.UnixMilli() {
			fenced++
		}
	}
	t.Logf("w3 refused %d commits after SIGCONT", fenced)
	ledger := c.checkInvariants("w1", "w2", "w3")
	// The items w3 had open when frozen, from the whole log: read right
	// after the SIGSTOP, the log could still miss w3's last events in the
	// pipe (CI, 2026-11-26: "no item open" with w3 mid-run).
	oldEpochs := openItems(c.log.all(), "w3", paused)
	if len(oldEpochs) == 0 {
		t.Fatalf("w3 had no item open when paused: nothing to audit")
	}
	after, before := commitsAfterTakeover(ledger, "w3", oldEpochs)
	t.Logf("w3's old epochs %v: %d commits accepted before the takeover, %d after", oldEpochs, before, len(after))
	if len(after) > 0 {
		t.Errorf("the paused worker committed under its old epoch after the new owner's first commit:\n  %s", strings.Join(after, "\n  "))
	}
}

// zkDownFor is how long TestZooKeeperDown keeps ZooKeeper stopped:
// SHARDFLOW_ZK_DOWN (a Go duration), default 30s.
func zkDownFor(t *testing.T) time.Duration {
	v := os.Getenv("SHARDFLOW_ZK_DOWN")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SHARDFLOW_ZK_DOWN=%q: want a positive Go duration such as 30s", v)
	}
	return d
}

// TestZooKeeperDown: ZooKeeper down for 30 s (SHARDFLOW_ZK_DOWN), then up:
// runs resume, no item is lost, no server is gone for good.
func TestZooKeeperDown(t *testing.T) {
	t.Parallel()
	down := zkDownFor(t)
	zk := integration.StartZooKeeper(t)
	zk.RequireControl(t)
	c := newCluster(t, zk.Servers(), 8, "--failover")
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3")}
	c.requireOwnership(settle, "w1", "w2", "w3")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+down)
	defer cancel()
	if err := zk.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The outage is the fault under test: it lasts exactly as configured.
	time.Sleep(down)
	// ZooKeeper serves from some moment inside Start, before Start sees it
	// ready and returns: the outage ends, at the latest, when Start begins.
	restarting := time.Now()
	if err := zk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	t.Logf("ZooKeeper down for %v (restart took %v)", restarting.Sub(stopped).Round(time.Millisecond), up.Sub(restarting).Round(time.Millisecond))

	// A commit is printed after its ledger write, which needs ZooKeeper:
	// what must not happen is a commit whose fencing check began while
	// ZooKeeper was down past the session timeout (Event.Checked), when
	// the session was lost and the runs cancelled. (Counting commits by
	// their print time up to Start's return counted the ones written
	// while Start still waited for ZooKeeper to look ready: 12 in 1 run of
	// 3.)
	var during []string
	var inStart int
	for _, e := range c.log.all() {
		if e.Ev == "commit" && e.T >= restarting.UnixMilli() && e.T < up.UnixMilli() {
			inStart++
		}
		if e.Ev == "commit" && e.Checked > stopped.Add(sessionTimeout+time.Second).UnixMilli() && e.Checked < restarting.UnixMilli() {
			during = append(during, fmt.Sprintf("%s item %d epoch %d checked %+dms written %+dms after the stop",
				e.Server, *e.Item, e.Epoch, e.Checked-stopped.UnixMilli(), e.T-stopped.UnixMilli()))
		}
	}
	t.Logf("%d commits written while Start waited for ZooKeeper to look ready", inStart)
	if len(during) > 0 {
		t.Errorf("%d commits whose fencing check began while ZooKeeper was down (after the session timeout): the check must refuse them:\n%s",
			len(during), strings.Join(during, "\n"))
	}
	c.log.waitFor(t, 60*time.Second, "every item begun after ZooKeeper came back", allBegunSince(up, c.total))
	c.requireOwnership(settle, "w1", "w2", "w3")
	for _, w := range ws {
		if w.exited() {
			t.Fatalf("worker %s exited during the outage: %v\n%s", w.id, w.exitErr(), w.stderrTail())
		}
	}
	c.checkInvariants("w1", "w2", "w3")
}

// TestConnectionCut: the connection between one worker and ZooKeeper cut by
// a TCP proxy behaves as a session expiry: its items go to the others after
// the timeout; after Restore it re-registers with a new session and rejoins.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	zk := integration.StartZooKeeper(t)
	proxy := integration.NewProxy(t, zk.Servers()[0])
	c := newCluster(t, zk.Servers(), 6, "--failover", "--streaming", "--run", "1s")
	c.start("w1")
	c.start("w2")
	w3 := c.startVia("w3", []string{proxy.Addr()})
	c.requireOwnership(settle, "w1", "w2", "w3")
	oldSession := lastSession(c.log.all(), "w3")

	proxy.Cut()
	cut := time.Now()
	c.requireOwnership(sessionTimeout+settle, "w1", "w2")
	c.log.waitFor(t, settle, "every item begun by w1 and w2 after the cut", allBegunSince(cut, c.total, "w1", "w2"))
	t.Logf("w3's items owned by the others %v after the cut", time.Since(cut).Round(time.Millisecond))

	proxy.Restore()
	restored := time.Now()
	c.requireOwnership(settle, "w1", "w2", "w3")
	c.log.waitFor(t, settle, "w3 on a new session, beginning items again", func(evs []Event) bool {
		s := lastSession(evs, "w3")
		if s == 0 || s == oldSession {
			return false
		}
		return len(filter(evs, func(e Event) bool { return e.Server == "w3" && e.Ev == "begin" && e.T > restored.UnixMilli() })) > 0
	})
	if w3.exited() {
		t.Fatalf("w3 exited after the cut: %v", w3.exitErr())
	}
	c.requireEveryItemRanAgain(restored)
	c.checkInvariants("w1", "w2", "w3")
}

// lastSession returns the id of server's last connected session, 0 if none.
func lastSession(evs []Event, server string) int64 {
	var id int64
	for _, e := range evs {
		if e.Server == server && e.Ev == "session" && e.Reason == "connected" {
			id = e.Seq
		}
	}
	return id
}

package protocol_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// crashMidRun starts servers l (leader), a and v on a job of total items
// with failover, has them all begin, completes l's and a's runs, kills v
// mid-run and waits until v's items are queued for failover; it returns
// v's items. In a synctest bubble.
func crashMidRun(t *testing.T, h *coordtest.Harness, total int) (l, a *coordtest.Server, items []int) {
	cfg := coordtest.Config("job", total, func(c *jobconfig.Config) { c.Failover = true })
	l = h.Start("l", cfg)
	a = h.Start("a", cfg)
	v := h.Start("v", cfg)
	runs := coordtest.BeginAll(t, l, a, v)
	parts := coordtest.AssertPartition(t, total, runs...)
	coordtest.CompleteAll(t, runs[0], runs[1])
	h.B.Kill(t, v.St)
	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's items queued for failover", func(q testsignal.Queued) bool {
		return slices.Equal(q.Items, parts[2])
	})
	// The leader's signal says the queue is written, not that a's tree
	// cache has seen it (ClaimFailover reads the queue there first): wait
	// until every watcher has handled the queue's watch (in a synctest
	// bubble; 94 of 300 runs failed a's claim without it).
	synctest.Wait()
	return l, a, parts[2]
}

// A paused server runs nothing, so a failover claim it holds keeps the
// item from every server (its owner skips an item failed over to another)
// until a resume: a paused server does not claim, and a claim made before
// the pause goes back to the queue at its next Begin. (Simulation seeds
// 229 and 276: the item never ran again.) In a synctest bubble.
func TestPausedServerGivesBackFailoverClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		l, a, items := crashMidRun(t, h, 3)
		synctest.Wait() // a's watcher has seen the queued item (ClaimFailover reads a's cache)
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || !ok {
			t.Fatalf("a's ClaimFailover = %v, %v; want v's item claimed", ok, err)
		}
		if err := h.Admin.Pause(ctx, "job", "a"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a's watcher has seen the pause
		if _, err := a.Job.Begin(ctx, time.Now()); !errors.Is(err, protocol.ErrPaused) {
			t.Fatalf("paused a's Begin: %v, want ErrPaused", err)
		}
		synctest.Wait()
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || ok {
			t.Fatalf("paused a's ClaimFailover = %v, %v; want no claim", ok, err)
		}
		defer coordtest.CompleteAll(t, runGivenBack(ctx, t, l, items[0]))
	})
}

// runGivenBack has l claim the item another server gave back to the
// failover queue and begin it: l's run must be the failover run of item
// alone. The caller completes the run.
func runGivenBack(ctx context.Context, t *testing.T, l *coordtest.Server, item int) *protocol.Run {
	t.Helper()
	if ok, err := l.Job.ClaimFailover(ctx); err != nil || !ok {
		t.Fatalf("l's ClaimFailover = %v, %v; want the item a gave back", ok, err)
	}
	run, err := l.Job.Begin(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if sh := run.Shards(); len(sh) != 1 || !sh[0].Failover || sh[0].Item != item {
		coordtest.CompleteAll(t, run)
		t.Fatalf("l's run = %+v, want the failover run of v's item %d", sh, item)
	}
	return run
}

// childrenHook runs hook once, right after the next Children of path
// (before its caller sees the answer).
type childrenHook struct {
	store.Store
	path string
	hook func()
}

func (c *childrenHook) Children(ctx context.Context, p string) ([]string, store.Stat, error) {
	kids, st, err := c.Store.Children(ctx, p)
	if p == c.path && c.hook != nil {
		h := c.hook
		c.hook = nil
		h()
	}
	return kids, st, err
}

// A claim reads that the queued item neither runs nor completed, and then
// claims it; the item's new owner may run it in between (its Begin read no
// failover node yet). The claim must not go through, or the item runs a
// second time for one crash (simulation seed 135). Here the owner begins
// and completes the item right after the claimer's read.
func TestClaimAfterTheOwnerRanTheItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 3, func(c *jobconfig.Config) { c.Failover = true })
		var servers []*coordtest.Server
		hooks := map[string]*childrenHook{}
		for _, id := range []string{"l", "a"} {
			hooks[id] = &childrenHook{Store: h.B.Connect(t)}
			s, err := h.TryStart(id, cfg, hooks[id])
			if err != nil {
				t.Fatal(err)
			}
			servers = append(servers, s)
		}
		v := h.Start("v", cfg)
		runs := coordtest.BeginAll(t, servers[0], servers[1], v)
		parts := coordtest.AssertPartition(t, 3, runs...)
		coordtest.CompleteAll(t, runs[0], runs[1])
		h.B.Kill(t, v.St)
		item := parts[2][0]
		h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's item queued", func(q testsignal.Queued) bool {
			return slices.Equal(q.Items, parts[2])
		})
		var st coord.JobStatus
		coordtest.Eventually(t, "v's item resharded to a survivor", func() bool {
			var err error
			st, err = h.Admin.Status(ctx, "job")
			return err == nil && !st.ReshardingPending && slices.ContainsFunc(st.Servers, func(ss coord.ServerStatus) bool {
				return ss.ID != "v" && slices.Contains(ss.Sharding, item)
			})
		})
		var owner, claimer *coordtest.Server
		for _, ss := range st.Servers {
			if slices.Contains(ss.Sharding, item) {
				for i, s := range servers {
					if s.ID == ss.ID {
						owner, claimer = s, servers[1-i]
					}
				}
			}
		}
		if owner == nil {
			t.Fatalf("no survivor owns v's item %d after the reshard: %+v", item, st.Servers)
		}
		synctest.Wait()
		hooks[claimer.ID].path = store.Join("/"+h.NS, "job", "execution", strconv.Itoa(item))
		hooks[claimer.ID].hook = func() {
			// After the claimer's check, before its Multi: the owner runs
			// the item (a normal run: it was not claimed yet) to the end.
			run, err := owner.Job.Begin(ctx, time.Now())
			if err != nil {
				t.Errorf("owner's Begin: %v", err)
				return
			}
			if !slices.ContainsFunc(run.Shards(), func(a protocol.Assignment) bool { return a.Item == item && !a.Failover }) {
				t.Errorf("owner's run = %+v, want v's item %d in it", run.Shards(), item)
			}
			coordtest.CompleteAll(t, run)
		}
		if ok, err := claimer.Job.ClaimFailover(ctx); err != nil || ok {
			t.Fatalf("ClaimFailover = %v, %v after the owner ran the item; want no claim (it would run the item again)", ok, err)
		}
		st, err := h.Admin.Status(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.FailoverQueue) != 0 {
			t.Fatalf("failover queue %v, want the stale entry dropped", st.FailoverQueue)
		}
	})
}

// A run's Complete on a suspended session parks the completion for the
// session's resume; a graceful leave right after the resume (before the
// watcher wrote it) must still write it: otherwise the running nodes go
// with the closed session, the item looks crashed mid-run and is failed
// over, a second run of a completed run (simulation seed 52).
func TestLeaveWritesParkedCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2, func(c *jobconfig.Config) { c.Failover = true })
		l := h.Start("l", cfg)
		a := h.Start("a", cfg)
		runs := coordtest.BeginAll(t, l, a)
		parts := coordtest.AssertPartition(t, 2, runs...)
		coordtest.CompleteAll(t, runs[0])
		h.B.Disconnect(t, a.St)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := runs[1].Complete(cctx, time.Time{}); !errors.Is(err, protocol.ErrSessionLost) {
			t.Fatalf("Complete on a suspended session: %v, want ErrSessionLost (the completion owed to the session)", err)
		}
		cancel()
		h.B.Reconnect(t, a.St)
		a.Stop(t)
		synctest.Wait()
		st, err := h.Admin.Status(context.Background(), "job")
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range st.Items {
			if is.Item == parts[1][0] && (!is.Completed || is.Running) {
				t.Errorf("a's item %d after a's leave: %+v, want completed", is.Item, is)
			}
		}
		if len(st.FailoverQueue) != 0 {
			t.Errorf("failover queue %v after a graceful leave, want empty", st.FailoverQueue)
		}
	})
}

package protocol_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// claimSetup starts l (leader), a (on hs) and v on a job of 3 items with
// failover, completes l's and a's first runs, crashes v mid-run and waits
// until v's item is queued and every watcher has seen it. It returns v's
// item. In a synctest bubble.
func claimSetup(t *testing.T, h *coordtest.Harness, hs *coordtest.HookStore) (l, a *coordtest.Server, item int) {
	t.Helper()
	cfg := coordtest.Config("job", 3, func(c *jobconfig.Config) { c.Failover = true })
	l = h.Start("l", cfg)
	a, err := h.TryStart("a", cfg, hs)
	if err != nil {
		t.Fatal(err)
	}
	v := h.Start("v", cfg)
	runs := coordtest.BeginAll(t, l, a, v)
	parts := coordtest.AssertPartition(t, 3, runs...)
	coordtest.CompleteAll(t, runs[0], runs[1])
	h.B.Kill(t, v.St)
	h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's item queued for failover", func(q testsignal.Queued) bool {
		return slices.Equal(q.Items, parts[2])
	})
	synctest.Wait() // every watcher has handled the queue's watch
	return l, a, parts[2][0]
}

// A failover claim whose transaction is applied but whose reply is lost (the
// connection dropped under it; the session resumes with the claim, an
// ephemeral, on it) must still turn into a run of the item. Before, the
// claimer forgot it: its owner skipped the item claimed by another server,
// the leader queued a claim again only once its ephemeral was gone, and the
// item never ran again while the claimer's session lived (ZooKeeper
// simulation seeds 1107147 and 1005053: "item 1 has not run again since the
// expiry of s1's session (failover on; owner s1, failover claim "s3")").
// In a synctest bubble.
func TestClaimWithItsReplyLostRunsTheItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		cut := &cutReply{}
		l, a, item := claimSetup(t, h, &coordtest.HookStore{Store: h.B.Connect(t), After: cut.after})
		cut.armed.Store(true)
		if _, err := a.Job.ClaimFailover(ctx); !errors.Is(err, store.ErrConnectionLoss) {
			t.Fatalf("a's ClaimFailover with its reply lost: %v, want the connection loss", err)
		}
		if cut.armed.Load() {
			t.Fatal("a's ClaimFailover made no transaction")
		}
		synctest.Wait()
		// The claim was applied: the item is a's to run, by failover. Every
		// item must run again within a few triggers of the survivors.
		for round := 0; round < 3; round++ {
			runs := coordtest.BeginAll(t, l, a)
			ran := slices.ContainsFunc(runs, func(r *protocol.Run) bool {
				return slices.ContainsFunc(r.Shards(), func(s protocol.Assignment) bool { return s.Item == item })
			})
			coordtest.CompleteAll(t, runs...)
			if ran {
				return
			}
			synctest.Wait()
		}
		st, err := h.Admin.Status(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("v's item %d never ran again after a's claim lost its reply; items: %+v", item, st.Items)
	})
}

// A Begin of a server holding a failover claim it has not run yet takes
// the claimed item into its failover run; when the read that run needs
// fails (the connection dropped), the Begin must fail, not run the item in
// a normal run: that run consumes nothing, and the failover run after it
// carries the claim's epoch, below the normal run's (ZooKeeper simulation
// seed 1005053: "item 0: s2 committed epoch 79 (failover) after s2
// committed epoch 86"). Here the claimed item is v's, resharded to a, and
// a's direct read of the item's disabled flag fails once. In a synctest
// bubble.
func TestBeginNeverRunsItsOwnClaimNormally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		var failRead atomic.Value // the path of the read to fail, once
		failRead.Store("")
		var hold atomic.Value // the item path whose cache loads wait
		hold.Store("")
		release := make(chan struct{})
		hs := &coordtest.HookStore{Store: h.B.Connect(t), Before: func(ctx context.Context, c coordtest.Call) error {
			if p := hold.Load().(string); p != "" && strings.HasSuffix(c.Method, "W") && (c.Path == p || strings.HasPrefix(c.Path, p+"/")) {
				// The watcher's load of the claimed item waits: the
				// flag stays unknown to the cache, read directly.
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			if p := failRead.Load().(string); p != "" && c.Method == "Exists" && c.Path == p && failRead.CompareAndSwap(p, "") {
				return store.ErrConnectionLoss
			}
			return nil
		}}
		_, a, item := claimSetup(t, h, hs)
		itemPath := "/" + h.NS + "/job/execution/" + strconv.Itoa(item)
		// v's item goes to a survivor at the reshard; make it a's.
		coordtest.Eventually(t, "v's item resharded", func() bool {
			st, err := h.Admin.Status(ctx, "job")
			return err == nil && !st.ReshardingPending && slices.ContainsFunc(st.Servers, func(ss coord.ServerStatus) bool {
				return ss.ID != "v" && slices.Contains(ss.Sharding, item)
			})
		})
		st, err := h.Admin.Status(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(st.Servers, func(ss coord.ServerStatus) bool { return ss.ID == "a" && slices.Contains(ss.Sharding, item) }) {
			t.Skipf("v's item %d went to l, not a: this test needs a as its owner", item)
		}
		hold.Store(itemPath)
		defer close(release)
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || !ok {
			t.Fatalf("a's ClaimFailover = %v, %v; want v's item claimed", ok, err)
		}
		failRead.Store(itemPath + "/disabled")
		r, err := a.Job.Begin(ctx, time.Now())
		if failRead.Load().(string) != "" {
			t.Fatal("a's Begin made no direct read of the claimed item's flag: the test no longer reaches the failing read")
		}
		if err == nil {
			defer coordtest.CompleteAll(t, r)
			for _, s := range r.Shards() {
				if s.Item == item && !s.Failover {
					t.Fatalf("a's Begin ran its claimed item %d in a normal run (epoch %d): %+v", item, s.Epoch, r.Shards())
				}
			}
			return
		}
		if !errors.Is(err, protocol.ErrSessionLost) {
			t.Fatalf("a's Begin with the claimed item's read failing: %v, want ErrSessionLost", err)
		}
		// The next Begin is the failover run of the claim.
		runs := coordtest.BeginAll(t, a)
		defer coordtest.CompleteAll(t, runs...)
		if sh := runs[0].Shards(); len(sh) != 1 || sh[0].Item != item || !sh[0].Failover {
			t.Fatalf("a's next run = %+v, want the failover run of item %d", sh, item)
		}
	})
}

// A paused server gives its failover claims back to the queue at its next
// Begin (TestPausedServerGivesBackFailoverClaims); a claim whose reply was
// lost is one of them: held, unknown, it would keep the item from every
// server until the resume. In a synctest bubble.
func TestPausedServerGivesBackAClaimWhoseReplyWasLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		cut := &cutReply{}
		l, a, item := claimSetup(t, h, &coordtest.HookStore{Store: h.B.Connect(t), After: cut.after})
		cut.armed.Store(true)
		if _, err := a.Job.ClaimFailover(ctx); !errors.Is(err, store.ErrConnectionLoss) {
			t.Fatalf("a's ClaimFailover with its reply lost: %v, want the connection loss", err)
		}
		if err := h.Admin.Pause(ctx, "job", "a"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a's watcher has seen the pause
		if _, err := a.Job.Begin(ctx, time.Now()); !errors.Is(err, protocol.ErrPaused) {
			t.Fatalf("paused a's Begin: %v, want ErrPaused", err)
		}
		synctest.Wait() // l's watcher has seen the item queued again
		coordtest.CompleteAll(t, runGivenBack(ctx, t, l, item))
	})
}

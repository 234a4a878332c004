package protocol_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// With monitorExecution off there is no failover (docs/configuration.md,
// "What monitorExecution = false gives up"): nothing marks an item running,
// so a failover run could not see its owner's run of the item, nor its
// owner the claim, and the item ran twice side by side. Memstore simulation
// seed 3002508: a crashed server's item, queued while monitorExecution was
// on, was claimed and run by failover after it went off, beside its new
// owner's normal run (and the distribute-once barrier of that trigger then
// timed out). An entry queued, a claim made (also by a Begin whose config
// snapshot predates the edit), or the stored config read before the edit
// must not license a failover run after it. In synctest bubbles.
func TestNoFailoverWithMonitorExecutionOff(t *testing.T) {
	const total = 3
	monitorOff := func(t *testing.T, h *coordtest.Harness) {
		t.Helper()
		if err := h.Admin.SetConfig(context.Background(), "job", jobconfig.FieldMonitorExecution, "false"); err != nil {
			t.Fatal(err)
		}
	}
	// start: l (leader), a (on hs) and v begin; l's and a's runs complete,
	// v crashes mid-run and its items are queued for failover.
	start := func(t *testing.T, h *coordtest.Harness, hs *coordtest.HookStore) (l, a *coordtest.Server, items []int) {
		cfg := coordtest.Config("job", total, func(c *jobconfig.Config) { c.Failover = true })
		l = h.Start("l", cfg)
		a, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		v := h.Start("v", cfg)
		runs := coordtest.BeginAll(t, l, a, v)
		parts := coordtest.AssertPartition(t, total, runs...)
		coordtest.CompleteAll(t, runs[0], runs[1])
		h.B.Kill(t, v.St)
		h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's items queued for failover", func(q testsignal.Queued) bool {
			return slices.Equal(q.Items, parts[2])
		})
		synctest.Wait() // a's cache has seen the queue
		return l, a, parts[2]
	}
	// noFailoverRun: the next trigger runs every item once, none by failover.
	noFailoverRun := func(t *testing.T, servers ...*coordtest.Server) {
		t.Helper()
		synctest.Wait()
		runs := coordtest.BeginAll(t, servers...)
		defer coordtest.CompleteAll(t, runs...)
		for _, r := range runs {
			for _, sh := range r.Shards() {
				if sh.Failover {
					t.Errorf("item %d ran by failover with monitorExecution off (run's config: monitorExecution=%t)", sh.Item, r.Config().MonitorsExecution())
				}
			}
		}
		coordtest.AssertPartition(t, total, runs...)
	}
	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("queued before the edit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := coordtest.NewHarness(t, coordtest.Mem())
			l, a, _ := start(t, h, &coordtest.HookStore{Store: h.B.Connect(t)})
			monitorOff(t, h)
			synctest.Wait()
			if ok, err := a.Job.ClaimFailover(ctx(t)); err != nil || ok {
				t.Fatalf("ClaimFailover after monitorExecution=false = %v, %v; want no claim", ok, err)
			}
			noFailoverRun(t, l, a)
		})
	})

	t.Run("claimed before the edit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := coordtest.NewHarness(t, coordtest.Mem())
			l, a, items := start(t, h, &coordtest.HookStore{Store: h.B.Connect(t)})
			if ok, err := a.Job.ClaimFailover(ctx(t)); err != nil || !ok {
				t.Fatalf("ClaimFailover = %v, %v; want v's item claimed", ok, err)
			}
			monitorOff(t, h)
			noFailoverRun(t, l, a)
			// The claim is gone from the store too.
			p := "/" + h.NS + "/job/execution/" + strconv.Itoa(items[0]) + "/failover"
			if ok, _, err := h.B.Connect(t).Exists(ctx(t), p); err != nil || ok {
				t.Errorf("%s after monitorExecution=false: exists=%v, %v; want gone", p, ok, err)
			}
		})
	})

	t.Run("edited while the claimer begins", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := coordtest.NewHarness(t, coordtest.Mem())
			hs := &coordtest.HookStore{Store: h.B.Connect(t)}
			l, a, _ := start(t, h, hs)
			if ok, err := a.Job.ClaimFailover(ctx(t)); err != nil || !ok {
				t.Fatalf("ClaimFailover = %v, %v; want v's item claimed", ok, err)
			}
			// a's Begin took its config snapshot (monitorExecution on) and
			// planned its claim; the edit clears the claim right before
			// the Begin's transaction.
			hs.OnNext("Multi", "", func() { monitorOff(t, h) })
			run, err := a.Job.Begin(ctx(t), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, sh := range run.Shards() {
				if sh.Failover {
					t.Errorf("item %d ran by failover on a claim the edit to monitorExecution=false cleared", sh.Item)
				}
			}
			coordtest.CompleteAll(t, run)
			noFailoverRun(t, l, a)
		})
	})

	t.Run("edited after the claimer read the config", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := coordtest.NewHarness(t, coordtest.Mem())
			hs := &coordtest.HookStore{Store: h.B.Connect(t)}
			l, a, items := start(t, h, hs)
			queue := "/" + h.NS + "/job/leader/failover/items"
			// The edit lands between the claimer's reads and its claim,
			// and an entry is queued again after it (a leader acting on a
			// snapshot from before the edit).
			hs.OnNext("Children", queue, func() {
				monitorOff(t, h)
				if _, err := h.B.Connect(t).Create(context.Background(), queue+"/"+strconv.Itoa(items[0]), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
					t.Error(err)
				}
			})
			if ok, err := a.Job.ClaimFailover(ctx(t)); err != nil || ok {
				t.Fatalf("ClaimFailover across monitorExecution=false = %v, %v; want no claim", ok, err)
			}
			noFailoverRun(t, l, a)
		})
	})
}

// A disabled item runs nowhere, by failover neither: an item disabled
// after its server crashed mid-run and its item was queued is not claimed
// (memstore simulation seed 3131645: the failover run of a disabled item,
// whose distribute-once registration counts for no set, was released by a
// set it had no part in, without a callback during its Once). In a synctest
// bubble.
func TestNoFailoverOfDisabledItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := coordtest.NewHarness(t, coordtest.Mem())
		l, a, items := crashMidRun(t, h, 3)
		if err := h.Admin.DisableItem(ctx, "job", items[0]); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ok, err := a.Job.ClaimFailover(ctx); err != nil || ok {
			t.Fatalf("ClaimFailover of disabled item %d = %v, %v; want no claim", items[0], ok, err)
		}
		runs := coordtest.BeginAll(t, l, a)
		defer coordtest.CompleteAll(t, runs...)
		for _, r := range runs {
			for _, sh := range r.Shards() {
				if sh.Item == items[0] {
					t.Errorf("disabled item %d ran (failover %v)", sh.Item, sh.Failover)
				}
			}
		}
	})
}

package protocol_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// TestClaimWaitsForAnotherClaimantsLatch: a claim that finds another
// server's failover latch waits for its release and claims, instead of
// giving up and leaving the queue to the next signal (which may be a
// whole failover run or trigger away); a latch that stays taken makes it
// give up after its bound. In a synctest bubble: "waiting" is a state
// (every goroutine blocked), and the bound runs on the fake clock.
func TestClaimWaitsForAnotherClaimantsLatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 6, func(c *jobconfig.Config) { c.Failover = true })
		l := h.Start("l", cfg) // leader
		a := h.Start("a", cfg)
		v := h.Start("v", cfg)
		runs := coordtest.BeginAll(t, l, a, v)
		coordtest.CompleteAll(t, runs[0], runs[1]) // v crashes mid-run
		h.B.Kill(t, v.St)
		queued := 0
		h.Signals.FailoverQueued.Wait(t, 10*time.Second, "v's two items queued for failover", func(q testsignal.Queued) bool {
			queued += len(q.Items)
			return queued == 2
		})
		coordtest.WaitSignal(t, a.Job, protocol.SignalFailover)

		other := h.B.Connect(t) // another server, claiming
		latch := store.Join(h.NS, "job", "leader", "failover", "latch")
		if _, err := other.Create(ctx, latch, []byte("l"), store.Ephemeral); err != nil {
			t.Fatal(err)
		}
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			ok, err := a.Job.ClaimFailover(ctx)
			done <- result{ok, err}
		}()
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("ClaimFailover = %v, %v while another server held the latch; want it to wait for the release", r.ok, r.err)
		default:
		}
		if err := other.Delete(ctx, latch, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if r := <-done; !r.ok || r.err != nil {
			t.Fatalf("ClaimFailover after the latch's release = %v, %v; want true, nil", r.ok, r.err)
		}

		// A latch that stays taken (its holder stuck): give up after the bound.
		if _, err := other.Create(ctx, latch, []byte("l"), store.Ephemeral); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if ok, err := a.Job.ClaimFailover(ctx); ok || err != nil {
			t.Fatalf("ClaimFailover under a latch never released = %v, %v; want false, nil", ok, err)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Fatalf("ClaimFailover gave up after %v (fake clock); want it to wait its 1 s bound", waited)
		}
	})
}

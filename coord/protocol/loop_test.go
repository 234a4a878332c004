package protocol_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
)

// One Registry's jobs share its event loop: a job whose watcher step waits
// on the store (here a re-arm held until its ctx ends) does not hold up
// another job's signals, and Leave cancels the waiting step and returns.
func TestEventLoopSlowJobHoldsNoOtherJob(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	held := &heldRearm{
		path:    "/" + h.NS + "/slow/servers",
		entered: make(chan struct{}),
		release: make(chan struct{}), // never closed: only ctx ends the wait
	}
	a, err := h.TryStart("a", coordtest.Config("slow", 2), &coordtest.HookStore{Store: h.B.Connect(t), Before: held.before})
	if err != nil {
		t.Fatal(err)
	}
	quick, err := a.Reg.Join(t.Context(), coordtest.Config("quick", 2))
	if err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	// Another server's join fires slow's servers watch: a's watcher step
	// for slow blocks re-arming it.
	h.Start("b", coordtest.Config("slow", 2))
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("slow's watcher never re-armed its servers watch after a join")
	}
	// quick's watcher still runs: an operator's trigger reaches it.
	if err := coord.NewAdmin(h.B.Connect(t), h.NS).Trigger(t.Context(), "quick"); err != nil {
		t.Fatal(err)
	}
	coordtest.WaitSignal(t, quick, protocol.SignalTrigger)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.Job.Leave(ctx); err != nil {
		t.Fatalf("Leave of the job whose step waits on the store: %v", err)
	}
	if err := quick.Leave(ctx); err != nil {
		t.Fatal(err)
	}
}

package protocol_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// A join whose connection drops midway (its first transaction writes the
// config) joins once the session is back, instead of failing AddJob: with
// several replicas starting at once on a loaded ZooKeeper, a worker of the
// fault suite died this way ("join job: write config: connection lost").
func TestJoinAcrossAConnectionBlip(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	inner := h.B.Connect(t)
	reconnected := make(chan struct{})
	// The next Multi, once armed, drops the connection under it: the session
	// is suspended, the Multi fails with a connection loss (it is not
	// applied), and the session comes back.
	var armed atomic.Bool
	armed.Store(true)
	st := &coordtest.HookStore{Store: inner, Before: func(_ context.Context, c coordtest.Call) error {
		if c.Method != "Multi" || !armed.CompareAndSwap(true, false) {
			return nil
		}
		h.B.Disconnect(t, inner)
		go func() {
			defer close(reconnected)
			h.B.Reconnect(t, inner)
		}()
		return fmt.Errorf("blip: %w", store.ErrConnectionLoss)
	}}
	s, err := h.TryStart("a", coordtest.Config("job", 2), st)
	<-reconnected
	if err != nil {
		t.Fatalf("join across a connection blip: %v", err)
	}
	if armed.Load() {
		t.Fatal("the join sent no transaction, so no blip was tried")
	}
	runs := coordtest.BeginAll(t, s)
	coordtest.AssertPartition(t, 2, runs...)
	coordtest.CompleteAll(t, runs...)
}

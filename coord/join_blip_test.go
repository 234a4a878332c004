package coord_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// blipStore drops the connection under the next Multi once armed: the
// session is suspended, the Multi fails with a connection loss (it is not
// applied), and the session comes back.
type blipStore struct {
	store.Store
	armed atomic.Bool
	blip  func()
}

func (b *blipStore) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if b.armed.CompareAndSwap(true, false) {
		b.blip()
		return nil, fmt.Errorf("blipStore: %w", store.ErrConnectionLoss)
	}
	return b.Store.Multi(ctx, ops...)
}

// A join whose connection drops midway (its first transaction writes the
// config) joins once the session is back, instead of failing AddJob: with
// several replicas starting at once on a loaded ZooKeeper, a worker of the
// fault suite died this way ("join job: write config: connection lost").
func TestJoinAcrossAConnectionBlip(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	inner := h.B.Connect(t)
	reconnected := make(chan struct{})
	st := &blipStore{Store: inner, blip: func() {
		h.B.Disconnect(t, inner)
		go func() {
			defer close(reconnected)
			h.B.Reconnect(t, inner)
		}()
	}}
	st.armed.Store(true)
	s, err := h.TryStart("a", coordtest.Config("job", 2), st)
	<-reconnected
	if err != nil {
		t.Fatalf("join across a connection blip: %v", err)
	}
	if st.armed.Load() {
		t.Fatal("the join sent no transaction, so no blip was tried")
	}
	runs := coordtest.BeginAll(t, s)
	coordtest.AssertPartition(t, 2, runs...)
	coordtest.CompleteAll(t, runs...)
}

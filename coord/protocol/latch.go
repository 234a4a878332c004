package protocol

import (
	"context"
	"errors"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// tryLatch is mutual exclusion without waiting, over one ephemeral node:
// whoever creates the node holds the latch; everyone else is told at once
// that someone does. The failover claim (leader/failover/latch: one claimer
// at a time, the others retry on the next queue signal) and the
// distribute-once barrier (guarantee/{phase}/runner: the callback runs on
// the one server that takes it) use it.
//
// Blocking and cancellation: tryAcquire never waits for a holder; it makes
// one create and returns, ctx bounding that call only. acquireWithin waits
// at most its bound (or until ctx ends: ctx.Err()) for one holder's release
// and tries once more. The latch is held
// until release, or until the holder's session ends (the node is
// ephemeral), so a holder that dies frees it. release makes one delete that
// is not cancelled by ctx (a cancelled run must still free the latch), and
// a latch already gone is no error.
type tryLatch struct {
	st    store.Store
	path  string
	owner []byte // the node's data: who holds it (a server id)
}

// tryAcquire takes the latch: true if this call created the node, false if
// someone holds it; an error only for a failed store call.
func (l tryLatch) tryAcquire(ctx context.Context) (bool, error) {
	_, err := l.st.Create(ctx, l.path, l.owner, store.Ephemeral)
	if errors.Is(err, store.ErrNodeExists) {
		return false, nil
	}
	return err == nil, err
}

// acquireWithin is tryAcquire that, when someone holds the latch, waits
// up to wait for its release and tries once more (a latch held longer
// means its holder is stuck or gone; the ephemeral goes with its session).
// False: still held.
func (l tryLatch) acquireWithin(ctx context.Context, wait time.Duration) (bool, error) {
	for attempt := 0; ; attempt++ {
		held, err := l.tryAcquire(ctx)
		if held || err != nil || attempt > 0 {
			return held, err
		}
		present, _, ch, err := l.st.ExistsW(ctx, l.path)
		if err != nil {
			return false, err
		}
		if !present {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ch: // released (or the watch ended): try once more
			t.Stop()
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
	}
}

// release frees the latch (ctx's values only: it is not cancelled by ctx).
func (l tryLatch) release(ctx context.Context) error {
	err := l.st.Delete(context.WithoutCancel(ctx), l.path, store.AnyVersion)
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	return err
}

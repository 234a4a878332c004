package recipe

import (
	"context"
	"errors"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// TryLatch is mutual exclusion without waiting, over one ephemeral node:
// whoever creates the node holds the latch; everyone else is told at once
// that someone does. coord's failover claim (one claimer at a time, the
// others retry on the next queue signal) and the distribute-once barrier
// (Barrier: the callback runs on the one server that takes its runner
// latch) use it.
//
// Blocking and cancellation: TryAcquire never waits for a holder; it makes
// one create and returns, ctx bounding that call only. AcquireWithin waits
// at most its bound (or until ctx ends: ctx.Err()) for one holder's release
// and tries once more. Release makes one delete that is not cancelled by
// ctx (a cancelled holder must still free the latch), and a latch already
// gone is no error.
//
// Session states: the latch is held until Release, or until the holder's
// session ends (the node is ephemeral), so a holder that dies frees it; a
// cut connection whose session resumes keeps it held, and a Release that
// failed on the cut must be made again then (Debts).
//
// A TryLatch is a value with no state of its own: safe from any goroutine.
type TryLatch struct {
	st    store.Store
	path  string
	owner []byte // the node's data: who holds it
}

// NewTryLatch returns the latch at path (absolute; its parent must exist),
// held as owner (the node's data, say a server id).
func NewTryLatch(st store.Store, path string, owner []byte) TryLatch {
	return TryLatch{st: st, path: path, owner: owner}
}

// Path is the latch's node.
func (l TryLatch) Path() string { return l.path }

// TryAcquire takes the latch: true if this call created the node, false if
// someone holds it; an error only for a failed store call.
func (l TryLatch) TryAcquire(ctx context.Context) (bool, error) {
	_, err := l.st.Create(ctx, l.path, l.owner, store.Ephemeral)
	if errors.Is(err, store.ErrNodeExists) {
		return false, nil
	}
	return err == nil, err
}

// AcquireWithin is TryAcquire that, when someone holds the latch, waits
// up to wait for its release and tries once more (a latch held longer
// means its holder is stuck or gone; the ephemeral goes with its session).
// False: still held.
func (l TryLatch) AcquireWithin(ctx context.Context, wait time.Duration) (bool, error) {
	for attempt := 0; ; attempt++ {
		held, err := l.TryAcquire(ctx)
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

// Release frees the latch (ctx's values only: it is not cancelled by ctx).
func (l TryLatch) Release(ctx context.Context) error {
	err := l.st.Delete(context.WithoutCancel(ctx), l.path, store.AnyVersion)
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	return err
}

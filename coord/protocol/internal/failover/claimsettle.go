package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// A claim's transaction that fails on the connection (its reply lost when
// the connection dropped, or ctx ended while it was in flight) may have been
// applied: the claim (execution/{item}/failover, an ephemeral) then lives on
// the claimer's session, which resumes, while the claimer does not know it.
// Nobody would run the item: the owner skips an item claimed by another
// server, the leader queues a claim again only when its ephemeral is gone,
// and the claimer never runs a claim it does not hold (ZooKeeper simulation
// seeds 1107147 and 1005053). So such an item is noted as unsure, and the
// claimer reads the claim directly before its next claim or Begin: a claim
// of this server on that session is adopted (run by the next failover
// Begin), anything else forgotten.

// noteUnsureClaim records that the claim of item on session sid may have
// been applied.
func (f *Failover) noteUnsureClaim(item int, sid int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claimsUnsure == nil {
		f.claimsUnsure = make(map[int]int64)
	}
	f.claimsUnsure[item] = sid
}

// SettleUnsureClaims resolves the unsure claims of registration session sid
// by a direct read each (none when there are none: the usual case), and
// reports whether it adopted one. A claim made on an earlier session went
// with it. A read that fails keeps the item unsure and returns the error.
func (f *Failover) SettleUnsureClaims(ctx context.Context, sid int64) (bool, error) {
	f.mu.Lock()
	var items []int
	for it, s := range f.claimsUnsure {
		if s != sid {
			delete(f.claimsUnsure, it)
			continue
		}
		items = append(items, it)
	}
	f.mu.Unlock()
	slices.Sort(items)
	adopted := false
	for _, it := range items {
		data, st, err := f.st.Get(ctx, f.p.Item(it, layout.NFailover))
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return adopted, fmt.Errorf("coord: job %q: read %s: %w", f.jname, f.p.Item(it, layout.NFailover), err)
		}
		mine := err == nil && st.EphemeralOwner == sid && string(data) == f.id
		f.mu.Lock()
		delete(f.claimsUnsure, it)
		mine = mine && f.RegSessionLocked() == sid
		if mine {
			f.claims[it] = st.Czxid
		}
		f.mu.Unlock()
		if !mine {
			continue
		}
		adopted = true
		f.cache.NoteDeleted(layout.RelFailoverQ + "/" + strconv.Itoa(it))
		f.cache.NoteCreated(layout.RelItem(it, layout.NFailover), layout.RelClaim(it))
		f.Kick() // the watcher starts watching the claimed item
		f.log.Info("claimed failover item (the claim's reply was lost; found on this session)", "item", it)
	}
	return adopted, nil
}

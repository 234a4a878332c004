package failover

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/store"
)

// BumpDir is the intent every failover writer adds to its
// transaction: it bumps the failover directory's data version, which a
// normal Begin checks (markRunning).
func BumpDir() txn.Intent { return txn.Intent{Kind: txn.Set, Rel: layout.RelFailoverQ} }

// ViewAt returns this server's last direct read of its items'
// claims and failover marks if it was made at failover directory version
// v, on the sharding node of Mzxid shardMzxid, on this registration (nil
// otherwise): every failover writer bumps v, so they are still current.
func (f *Failover) ViewAt(v int32, shardMzxid int64) map[int]ItemView {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v < 0 || f.foView != (failoverView{version: v, shardMzxid: shardMzxid, session: f.RegSessionLocked()}) {
		return nil
	}
	return f.foItems
}

// NoteView keeps view as the claims and marks of this server's
// items at failover directory version v.
func (f *Failover) NoteView(v int32, shardMzxid int64, view map[int]ItemView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.foView = failoverView{version: v, shardMzxid: shardMzxid, session: f.RegSessionLocked()}
	f.foItems = view
}

// ReadView returns view with the claims and failover marks of
// items read directly (pipelined).
func (f *Failover) ReadView(ctx context.Context, view map[int]ItemView, items []int) (map[int]ItemView, error) {
	got := make([]ItemView, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i, it := range items {
		g.Go(func() error {
			ok, cst, err := f.st.Exists(gctx, f.p.Item(it))
			if err != nil {
				return fmt.Errorf("coord: job %q: read %s: %w", f.jname, f.p.Item(it), err)
			}
			if !ok {
				return nil
			}
			f.cache.NoteItemStat(layout.RelItem(it), cst)
			got[i].Mark = Done(cst)
			if cst.NumChildren == 0 {
				return nil
			}
			claimed, _, err := f.st.Exists(gctx, f.p.Item(it, layout.NFailover))
			if err != nil {
				return fmt.Errorf("coord: job %q: read %s: %w", f.jname, f.p.Item(it, layout.NFailover), err)
			}
			got[i].Claimed = claimed
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	next := make(map[int]ItemView, len(view)+len(items))
	for k, v := range view {
		next[k] = v
	}
	for i, it := range items {
		next[it] = got[i]
	}
	return next, nil
}

// ItemView is what a direct read found of one item: a failover claim on it,
// and its failover mark (Done).
type ItemView struct {
	Claimed bool
	Mark    int64
}

// Done reads the mark of a completed failover run off the Stat of
// an item container: a failover run's Complete sets the container's data
// (nothing else does), so once its Version is above 0 its Mzxid is the
// zxid of the last such Complete. A normal run's epoch is the larger of its
// sharding node's Mzxid and this mark: a failover claim made after the
// reshard has a Czxid above the sharding node's Mzxid, and the item's
// return to its owner must still raise the epoch.
func Done(st store.Stat) int64 {
	if st.Version > 0 {
		return st.Mzxid
	}
	return 0
}

// failoverView identifies a direct read of a server's claims and failover
// marks: the failover directory's version, the sharding node's Mzxid and
// the registration's session it was made at.
type failoverView struct {
	version    int32
	shardMzxid int64
	session    int64
}

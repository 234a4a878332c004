package runs

import (
	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/store"
)

// Fence is the ownership check of a run that Begin just began, as version
// checks another transaction of the run (a workflow run's record of its
// items) includes so that it commits only while the run owns its items:
// CheckOwnership answers for its moment, these for the transaction's.
//
// A normal run (shardVersion >= 0): this server's sharding node at the
// version Begin was fenced by (a reshard since fails it); a monitored one
// (live) also its run record at the version its Begin wrote (a later
// Begin of this server rewrites it, and the leader's failover scan marks
// it queued before any other run may claim its items) and its live
// marker (ephemeral: gone with the run's session). An unmonitored run has
// no failover: its items move only with a reshard.
//
// A failover run: per item, its claim (execution/{i}/failover, ephemeral:
// gone with the claimant's session, or cleared by a config edit) and the
// item's lastBeginTime at the version its Begin wrote: only failover
// Begins write it, so a claim made since the run's claim was lost
// (the same node again) fails the check once its run begins, before that
// run can Pick the item; a normal run of the item needs the claim gone.
//
// written is the Begin's transaction's Written.
func (r *Runs) Fence(shardVersion int32, live bool, failover []int, written txn.Written) []store.Op {
	var ops []store.Op
	if shardVersion >= 0 {
		ops = append(ops, &store.CheckOp{Path: r.p.Server(r.id, layout.NSharding), Version: shardVersion})
	}
	if rec := r.p.Server(r.id, layout.NRun); live {
		ops = append(ops, &store.CheckOp{Path: rec, Version: version(written, rec)},
			&store.CheckOp{Path: r.p.Server(r.id, layout.NRun, layout.NLive), Version: store.AnyVersion})
	}
	for _, it := range failover {
		ops = append(ops, &store.CheckOp{Path: r.p.Item(it, layout.NFailover), Version: store.AnyVersion},
			&store.CheckOp{Path: r.p.Item(it, layout.NLastBeginTime), Version: version(written, r.p.Item(it, layout.NLastBeginTime))})
	}
	return ops
}

// version is the version written left on path; a node Begin did not
// write (never expected) gets a version no node has, so the fence fails
// closed.
func version(written txn.Written, path string) int32 {
	if v, ok := written[path]; ok {
		return v
	}
	return -2
}

package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/leader"
	"github.com/shardflow/shardflow/coord/sharding"
	"github.com/shardflow/shardflow/coord/store"
)

// A join that stands alone reshards in its own transaction.
//
// When no election candidate stands and no other server is online, the
// joining server is the job's only live server: its join transaction takes
// the leadership (the host node beside its candidate) and, in the same
// Multi, writes the assignment the leader's reshard would write at once
// after it (every item to this server, or none when it is disabled; the
// offline servers' sharding nodes emptied), deletes the resharding flag
// and prunes the failover entries beyond the total. A restarted process's
// jobs (one server each) then cost one transaction instead of a join, a
// prompt reshard's eight requests and the two watches it fires (10,000
// jobs in one process, issue 15).
//
// Why it is the reshard's assignment, fenced as the reshard's Multi is:
//   - the servers' node is set at the membership version its listing
//     returned (a join, leave, disable or shutdown of any server bumps
//     it), so a server that registered after the listing fails the Multi;
//   - a stored config is checked at the version the cache read (every
//     config writer bumps it), so the total and strategy are the ones
//     committed;
//   - the host node is created, so a leader elected meanwhile fails it;
//   - processing is created and deleted, as in reshardNow, so a split
//     reshard in progress fails it.
//
// A failed Multi plans again as an ordinary join (attempt > 0), whose flag
// the leader reshards promptly, as before. Jobs whose plan would not fit a
// request stay on that path too.

// loneInput is what a lone join's reshard is planned on.
type loneInput struct {
	cfg         jobconfig.Config // the config the job runs on after the join
	ownKids     []string         // servers/{id}'s children before the join; nil: no node
	ownDisabled bool             // this server's disabled flag after the join
	others      []string         // the other servers listed under servers
	flagUp      bool             // the resharding flag exists
	dirs        bool             // leader/sharding exists (a stored job)
}

// loneResult is what a lone join's transaction wrote.
type loneResult struct {
	live  []string
	total int
}

// maxLonePrunes bounds the failover entries a lone join deletes in its
// transaction; more go to the leader's reshard (which splits its Multi).
const maxLonePrunes = 64

// loneReshard plans the lone join's reshard: ok false when the join does
// not stand alone after all (another server is online) or the plan would
// not fit; the caller then joins as before.
func (jn *joiner) loneReshard(ctx context.Context, in loneInput) (ops []store.Op, res loneResult, ok bool, _ error) {
	j := jn.j
	total := in.cfg.ShardingTotalCount
	strategy, err := sharding.Lookup(in.cfg.ShardingStrategy)
	if err != nil || total < 1 {
		return nil, loneResult{}, false, nil // the leader's reshard reports or splits it
	}
	var prunes []string
	if in.dirs {
		prunes = leader.QueuePrunes(j.cache.Children(layout.RelFailoverQ), total)
		if len(prunes) > maxLonePrunes {
			return nil, loneResult{}, false, nil
		}
	}
	// The other servers' states, read directly (the cache loads them after
	// the join): any of them online, and the join does not stand alone.
	hasSharding := make(map[string]bool, len(in.others))
	for _, s := range in.others {
		kids, _, err := j.st.Children(ctx, j.p.Server(s))
		if errors.Is(err, store.ErrNoNode) {
			continue // pruned meanwhile; the membership check covers it
		}
		if err != nil {
			return nil, loneResult{}, false, fmt.Errorf("coord: join job %q: read %s: %w", j.jname, j.p.Server(s), err)
		}
		st := layout.ListedServerState(kids)
		if st.Online {
			return nil, loneResult{}, false, nil
		}
		hasSharding[s] = st.Sharding
	}
	var live []string
	if !in.ownDisabled {
		live = []string{j.id}
	}
	hasSharding[j.id] = slices.Contains(in.ownKids, layout.NSharding)
	for _, w := range leader.PlanSharding(strategy, live, j.jname, total, hasSharding) {
		ops = append(ops, layout.PutOp(j.p.Server(w.Server, layout.NSharding), w.Items, w.Exists))
	}
	for _, q := range prunes {
		ops = append(ops, &store.DeleteOp{Path: j.p.Abs(layout.RelFailoverQ + "/" + q), Version: store.AnyVersion})
	}
	if in.dirs {
		ops = append(ops, &store.CreateOp{Path: j.p.Abs(layout.RelProcessing), Mode: store.Ephemeral})
		if in.flagUp {
			ops = append(ops, &store.DeleteOp{Path: j.p.Abs(layout.RelNecessary), Version: store.AnyVersion})
		}
		ops = append(ops, &store.DeleteOp{Path: j.p.Abs(layout.RelProcessing), Version: store.AnyVersion})
	}
	return ops, loneResult{live: live, total: total}, true, nil
}

// planLoneJoin plans a stored job's lone join (its transaction takes the
// leadership; no status node of this server stood) on cfg, the config the
// job runs on after it: the reshard's operations and, for a stored config
// that wins, a check of the config version the cache read. ok false: join
// as before.
func (jn *joiner) planLoneJoin(ctx context.Context, local, cfg jobconfig.Config, storedWins bool, rd joinReads) (ops []store.Op, res loneResult, ok bool, _ error) {
	j := jn.j
	if storedWins {
		st, loaded := j.cache.DataStat(layout.NConfig)
		if !loaded {
			return nil, loneResult{}, false, nil
		}
		ops = append(ops, &store.CheckOp{Path: j.p.Abs(layout.NConfig), Version: st.Version})
	}
	ownDisabled := local.Disabled
	if slices.Contains(rd.serverKids, layout.NDisabled) {
		d, loaded := j.cache.LoadedData(layout.RelServer(j.id, layout.NDisabled))
		if !loaded {
			return nil, loneResult{}, false, nil // gone meanwhile
		}
		ownDisabled = layout.FlagTrue(d)
	}
	others := slices.DeleteFunc(slices.Clone(rd.servers), func(s string) bool { return s == j.id })
	lops, res, ok, err := jn.loneReshard(ctx, loneInput{cfg: cfg, ownKids: rd.serverKids, ownDisabled: ownDisabled, others: others, flagUp: rd.flagUp, dirs: true})
	if err != nil || !ok {
		return nil, loneResult{}, false, err
	}
	return append(ops, lops...), res, true, nil
}

// fitsWith reports whether a join's operations with a lone reshard's
// added stay within the store's request limit: a reshard too large for
// one request is left to the leader, whose reshard splits it.
func (jn *joiner) fitsWith(ops, lone []store.Op) bool {
	j := jn.j
	return store.MultiSize(ops)+store.MultiSize(lone) <= store.RequestLimit(j.st)
}

// membershipAt is touchMembership fenced at the version a listing of the
// servers returned.
func membershipAt(p layout.JobPaths, version int32) store.Op {
	return &store.SetOp{Path: p.Abs(layout.NServers), Version: version}
}

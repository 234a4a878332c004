package protocol

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/sharding"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// The leader's duties, in one place: resharding (on a Begin, or promptly
// from the watcher when no item runs), the membership check that raises
// the resharding flag, and the periodic reconcile. The election that makes
// a server leader is recipe.Election; the failover scan the leader runs on
// departures is failover.go.

// reshard is the leader's resharding: wait until no item runs, then in ONE
// Multi create processing, write every server's sharding node, drop the
// failover queue entries of items beyond the total, and delete necessary
// and processing. Queue entries of other items stay: a crashed server's
// unfinished items run again at once on whichever server claims them, not
// at their new owner's next trigger (the leader reshards promptly after a
// crash, usually before anyone claimed them).
//
// The wait ends early when the flag goes: the leader's watcher may reshard
// promptly (reshardWhenIdle) while a Begin of the leader waits here, and the
// runs that start on the new assignment must not keep this Begin waiting.
// It reads the items directly: the cache watches only this server's items.
// Resharding is rare, so O(items) reads are fine here.
func (j *Job) reshard(ctx context.Context, cfg jobconfig.Config) error {
	if !cfg.MonitorsExecution() {
		return j.reshardNow(ctx, cfg)
	}
	nec := j.p.Abs(layout.RelNecessary)
	for {
		ok, _, necW, err := j.st.ExistsW(ctx, nec)
		if err != nil {
			return fmt.Errorf("coord: job %q: read %s: %w", j.jname, nec, err)
		}
		if !ok {
			return nil // resharded meanwhile
		}
		var watch <-chan store.Event
		running, found, err := j.firstRunning(ctx, recipe.ChanExists(j.st, &watch))
		if err != nil {
			return err
		}
		if !found {
			return j.reshardNow(ctx, cfg)
		}
		select {
		case <-watch:
		case <-necW:
		case <-ctx.Done():
			return fmt.Errorf("coord: job %q: waiting for the run of server %s to finish before resharding: %w", j.jname, running, ctx.Err())
		}
	}
}

// reshardWhenIdle is the leader watcher's prompt resharding: when the flag
// is set and no item runs, it reshards at once, so that servers waiting in
// Begin do not depend on the leader's next trigger (a trigger-only job may
// have none for a long time). While a run goes on it never reshards: it
// arms a watch on that server's live marker (watch) and returns waiting,
// and the watcher calls it again when the watch fires. It never blocks on
// a run.
func (j *Job) reshardWhenIdle(ctx context.Context, watch recipe.ExistsWatch) (waiting bool, _ error) {
	if !j.isLeader() || !j.cache.Has(layout.RelNecessary) || j.cache.Has(layout.RelProcessing) {
		return false, nil
	}
	if _, _, err := j.ready(); err != nil {
		return false, nil // not registered or refusing runs: Begin reshards later
	}
	// The cache may still show a flag a reshard just cleared.
	if nec, _, err := j.st.Exists(ctx, j.p.Abs(layout.RelNecessary)); err != nil || !nec {
		return false, err
	}
	cfg := j.Config()
	if cfg.MonitorsExecution() {
		_, found, err := j.firstRunning(ctx, watch)
		if err != nil || found {
			return found, err
		}
	}
	return false, j.reshardNow(ctx, cfg)
}

// reshardNow writes the new assignment in one Multi; see reshard. The
// Multi checks the membership version (touchMembership) it planned on:
// when a server joined, left, or was disabled, enabled or shut down
// meanwhile, the Multi fails and the assignment is planned again on the
// new membership, so the flag is never cleared by a plan that missed one.
func (j *Job) reshardNow(ctx context.Context, cfg jobconfig.Config) error {
	strategy, err := sharding.Lookup(cfg.ShardingStrategy)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadConfig, j.p.Config("jobShardingStrategy"), err)
	}
	j.reshardMu.Lock()
	defer j.reshardMu.Unlock()
	for attempt := 1; ; attempt++ {
		// The membership version comes with the listing (one read): the
		// Multi's check of it refuses a plan that missed a change made
		// after the listing.
		servers, live, members, err := j.nodes.ReadServers(ctx)
		if err != nil {
			return err
		}
		// The total is read directly too, and checked in the Multi: cfg may
		// be a Begin's snapshot from before an edit of the total whose
		// resharding flag this reshard clears (it left the old items
		// assigned for good: simulation seed 109573).
		total, totalCheck, err := j.nodes.ReadTotal(ctx, cfg.ShardingTotalCount)
		if err != nil {
			return err
		}
		ins := []txn.Intent{
			{Kind: txn.Check, Rel: layout.NServers, Version: members},
			{Kind: txn.Create, Rel: layout.RelProcessing, Mode: store.Ephemeral},
		}
		if totalCheck != nil {
			ins = append(ins, *totalCheck)
		}
		for _, w := range planSharding(strategy, live, j.jname, total, servers) {
			k := txn.Create
			if w.exists {
				k = txn.Set
			}
			ins = append(ins, txn.Intent{Kind: k, Rel: layout.RelServer(w.server, layout.NSharding), Data: w.items})
		}
		for _, q := range queuePrunes(j.cache.Children(layout.RelFailoverQ), total) {
			ins = append(ins, txn.Intent{Kind: txn.DeleteIfPresent, Rel: layout.RelFailoverQ + "/" + q})
		}
		ins = append(ins,
			txn.Intent{Kind: txn.Delete, Rel: layout.RelNecessary},
			txn.Intent{Kind: txn.Delete, Rel: layout.RelProcessing})
		err = j.tx.Commit(ctx, ins)
		if errors.Is(err, store.ErrBadVersion) && attempt < layout.WriteAttempts {
			j.log.Debug("membership changed while resharding; planning again")
			continue
		}
		if err != nil {
			if errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrNodeExists) {
				// Another leader incarnation resharded, or a server node
				// vanished: re-read through the cache and go again.
				return nil
			}
			return fmt.Errorf("coord: job %q: reshard: %w", j.jname, err)
		}
		j.resharded(live, total, "leader")
		j.pruneItemsBeyond(ctx, total)
		j.signalResharded(live, total) // after the prune: the reshard is over
		return nil
	}
}

// shardingWrite is one server's sharding node as a reshard writes it.
type shardingWrite struct {
	server string
	items  []byte // layout.FormatItems of its items
	exists bool   // its sharding node exists: set, not created
}

// planSharding is a reshard's plan, for the leader's reshard and a lone
// join's alike: the strategy's assignment of total items over the live
// servers, written to the sharding node of every server of servers (true:
// its node exists), in server order.
func planSharding(strategy sharding.Strategy, live []string, job string, total int, servers map[string]bool) []shardingWrite {
	assign := strategy.Shard(live, job, total)
	out := make([]shardingWrite, 0, len(servers))
	for _, s := range slices.Sorted(maps.Keys(servers)) {
		out = append(out, shardingWrite{server: s, items: layout.FormatItems(assign[s]), exists: servers[s]})
	}
	return out
}

// resharded records a committed reshard's membership and total (the
// leader's bookkeeping, raiseIfMembershipChanged) and logs it; by says
// whose it was (the leader's, or a lone join's).
func (j *Job) resharded(live []string, total int, by string) {
	j.mu.Lock()
	j.shardedLive = shardedAs(live, total)
	j.mu.Unlock()
	j.log.Info("resharded", "servers", live, "total", total, "by", by)
}

// signalResharded tells the tests of a reshard that is over.
func (j *Job) signalResharded(live []string, total int) {
	if s := j.reg.cfg.TestSignals; s != nil {
		s.Resharded.Send(testsignal.Resharded{Event: j.event(), Servers: slices.Clone(live), Total: total})
	}
}

// queuePrunes names the entries of the failover directory (its listing,
// names) that a reshard to total deletes: queue entries of items beyond it
// or malformed, and the claim records of items beyond it. Such an item is
// pruned after the reshard, claim and all (pruneItemsBeyond): the claim is
// dropped, not lost, and a total raised again must not queue it anew. A
// claim's record otherwise goes with its claim (claimrecord.go).
func queuePrunes(names []string, total int) []string {
	var out []string
	for _, q := range names {
		if it, ok := layout.ParseClaimName(q); ok {
			if it >= total {
				out = append(out, q)
			}
			continue
		}
		if it, ok := layout.ParseItemName(q); !ok || it >= total {
			out = append(out, q)
		}
	}
	return out
}

// pruneItemsBeyond removes the execution nodes of items beyond a lowered
// total that Admin.SetConfig left because they were running then. The
// leader calls it after resharding, when none of them runs any more.
// Failures are logged: the nodes are only clutter, never read by runs. The
// items are listed from the tree cache (which watches the execution node):
// a listing of the store on every reshard cost a read per job start; one
// the cache has not seen yet is pruned at the next reshard.
func (j *Job) pruneItemsBeyond(ctx context.Context, total int) {
	for _, n := range j.cache.Children(layout.NExecution) {
		if it, ok := layout.ParseItemName(n); ok && it >= total {
			if err := layout.PruneItem(ctx, j.st, j.p, it); err != nil {
				j.warn(ctx, "cannot prune item beyond the total", "item", it, "total", total, "err", err)
			}
		}
	}
}

// firstRunning returns the first server found running a monitored normal
// run (its live marker servers/{id}/run/live exists; found true), with a
// watch armed on that marker by watch, or found false when none runs. It
// reads directly, one existence read per server (none per item). Failover
// runs do not hold a reshard: their claim is their fence (the items' new
// owners skip a claimed item).
func (j *Job) firstRunning(ctx context.Context, watch recipe.ExistsWatch) (server string, found bool, _ error) {
	servers, _, err := j.st.Children(ctx, j.p.Abs(layout.NServers))
	if err != nil {
		return "", false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Abs(layout.NServers), err)
	}
	for _, s := range servers {
		p := j.p.Server(s, layout.NRun, layout.NLive)
		ok, st, err := j.st.Exists(ctx, p)
		if err == nil && ok && !(s == j.id && j.markerLeftByEndedRun(st)) {
			// Watch only the marker found; scan again when it goes.
			ok, st, err = watch(ctx, p)
		}
		if err != nil {
			return "", false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, p, err)
		}
		if ok && s == j.id && j.markerLeftByEndedRun(st) {
			// Left by a run of this server that no longer holds it (a
			// Begin whose reply was lost, a Complete refused while the
			// session was suspended), on a session that resumed: only
			// this server's next Begin would remove it, and that Begin
			// waits for this reshard (ZooKeeper simulation seed 900184).
			// Versioned, as in Begin.
			if err := j.st.Delete(ctx, p, st.Version); err == nil || errors.Is(err, store.ErrNoNode) {
				j.log.Info("removed the live marker left by an earlier run of this server before resharding")
				continue
			}
		}
		if ok {
			return s, true, nil
		}
	}
	return "", false, nil
}

// leaderDuties raises the resharding flag when the set of live servers
// (joined, departed, disabled or shut down) or the total differs from what
// the last reshard used, and requeues a dead server's unfinished items for
// failover.
//
// The failover scan runs on every departure the cache shows (a server
// without a status node that was not so at the last check), not only when
// the flag goes up: a server can join, be sharded by the leader's Begin
// (which reads the servers directly), run and die before this watcher
// first sees it, so the cache's live set never changes; and a reshard that
// read the servers after a crash leaves nothing to raise. The scan reads
// the store directly and queues each item once, so running it more often
// costs reads, never a duplicate.
func (j *Job) leaderDuties(ctx context.Context, force bool) {
	live := j.nodes.LiveServers()
	departed := j.newlyDeparted()
	total := j.Config().ShardingTotalCount
	j.reshardMu.Lock()
	raised := j.raiseIfMembershipChanged(ctx, live, total, force)
	j.reshardMu.Unlock()
	if raised || departed {
		j.enqueueOrphans(ctx)
	}
}

// newlyDeparted records the servers the cache shows without a status node
// and reports whether one of them was not so at the previous call.
func (j *Job) newlyDeparted() bool {
	var gone []string
	for _, s := range j.cache.Children(layout.NServers) {
		if !jobnodes.CachedServerState(j.cache, s).Online {
			gone = append(gone, s)
		}
	}
	var news []string
	for _, s := range gone {
		if !slices.Contains(j.departed, s) {
			news = append(news, s)
		}
	}
	j.departed = gone
	if len(news) > 0 {
		// The start of a failover, for operators and for the failover
		// benchmark's timeline (integration/faults).
		j.log.Info("servers went offline", "servers", news)
	}
	return len(news) > 0
}

// raiseIfMembershipChanged raises the resharding flag when live or total
// differ from what the watcher saw last and from what the last reshard
// used. The caller holds reshardMu.
//
// Arrivals count as well as departures: a joining server raises the flag
// itself, but when the flag is already up (say, from its own departure
// after a lost session) its join changes nothing in the store, and a
// reshard that read the servers just before the join would clear the flag
// without it. Holding reshardMu, this check runs after such a reshard and
// sees that it used a membership without the newcomer.
func (j *Job) raiseIfMembershipChanged(ctx context.Context, live []string, total int, force bool) bool {
	cur := strings.Join(live, ",")
	j.mu.Lock()
	last, lastTotal, sharded := j.lastLive, j.lastTotal, j.shardedLive
	j.lastLive, j.lastTotal = cur, total
	j.mu.Unlock()
	if !force && sharded == shardedAs(live, total) {
		// The last reshard (which reads the servers directly) already
		// used exactly this membership: a change seen late here.
		return false
	}
	// A cache view that differs from the last reshard's counts as a change
	// even when the cache itself saw none: a server the reshard used may
	// have died before the cache ever saw it live.
	changed := last != "" && (last != cur || total != lastTotal) ||
		sharded != "" && sharded != shardedAs(live, total)
	if !force && !changed {
		return false
	}
	if !force {
		// The cache told of a change; the decision rests on a direct read,
		// as the reshard's own: a cache that has not yet seen a join the
		// last reshard used would otherwise raise a spurious flag, which
		// holds every Begin until the runs begun meanwhile complete.
		_, direct, _, err := j.nodes.ReadServers(ctx)
		if err != nil {
			j.warn(ctx, "cannot read the servers to confirm a membership change; raising the resharding flag", "err", err)
		} else if sharded == shardedAs(direct, total) {
			return false
		}
	}
	if j.flagRaised {
		// The join or re-registration raised it just before, after this
		// server's registration: a second raise would cost a write per
		// job start (10,000 jobs in a process, issue 15).
		return true
	}
	if err := j.setNecessary(ctx); err != nil {
		j.warn(ctx, "cannot raise the resharding flag", "err", err)
	}
	return true
}

// owners maps each item to the server whose sharding node lists it.
func (j *Job) owners() map[int]string {
	own := make(map[int]string)
	for _, s := range j.cache.Children(layout.NServers) {
		d, _, ok := j.cache.Get(layout.RelServer(s, layout.NSharding))
		if !ok {
			continue
		}
		items, err := layout.ParseItems(d)
		if err != nil {
			continue
		}
		for _, it := range items {
			own[it] = s
		}
	}
	return own
}

// reconcile is the leader's periodic check: an item owned by an offline or
// disabled server, or by no one, raises the resharding flag; offline server
// nodes older than the grace are pruned (operator-disabled ones are kept).
func (j *Job) reconcile(ctx context.Context) {
	cfg := j.Config()
	live := j.nodes.LiveServers()
	if len(live) > 0 {
		own := j.owners()
		for it := range cfg.ShardingTotalCount {
			s, ok := own[it]
			if !ok || !slices.Contains(live, s) {
				j.log.Info("reconcile: item has no live owner; resharding", "item", it, "owner", s)
				if err := j.setNecessary(ctx); err != nil {
					j.warn(ctx, "cannot raise the resharding flag", "err", err)
				}
				break
			}
		}
	}
	now := j.reg.cfg.Now()
	for _, s := range j.cache.Children(layout.NServers) {
		if jobnodes.CachedServerState(j.cache, s).Online {
			delete(j.offlineSeen, s)
			continue
		}
		since, ok := j.offlineSeen[s]
		if !ok {
			j.offlineSeen[s] = now
			continue
		}
		if now.Sub(since) < j.reg.cfg.OfflineServerGrace {
			continue
		}
		if d, _, ok := j.cache.Get(layout.RelServer(s, layout.NDisabled)); ok && layout.FlagTrue(d) {
			continue
		}
		j.log.Info("pruning offline server", "offline-server", s, "since", since)
		if err := store.DeleteAll(ctx, j.st, j.p.Server(s)); err != nil {
			j.warn(ctx, "cannot prune offline server", "offline-server", s, "err", err)
			continue
		}
		delete(j.offlineSeen, s)
	}
	j.enqueueOrphans(ctx)
}

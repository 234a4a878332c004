// Package leader holds a job's leader duties, in one place: resharding
// (on a Begin, or promptly from the watcher when no item runs), the
// membership check that raises the resharding flag, and the periodic
// reconcile. The election that makes a server leader is recipe.Election;
// the failover scan the leader runs on departures is the job's
// (Hooks.EnqueueOrphans).
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/sharding"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// Hooks are what the leader's duties ask of the job they serve.
type Hooks struct {
	// Config returns the job's current config.
	Config func() jobconfig.Config
	// IsLeader reports whether this server leads the job now.
	IsLeader func() bool
	// Ready checks the preconditions of a Begin (a live registration, a
	// valid config ...): a reshard is for a server that may run.
	Ready func() (int64, context.Context, error)
	// MarkerLeftByEndedRun reports whether this server's live marker (its
	// Stat) was left by a run of this process that no longer holds it.
	MarkerLeftByEndedRun func(store.Stat) bool
	// EnqueueOrphans is the failover scan: a dead server's unfinished
	// items queued for failover.
	EnqueueOrphans func(ctx context.Context)
	// Warn logs a failure of the watcher's work (at Debug once ctx ended).
	Warn func(ctx context.Context, msg string, args ...any)
}

// Config is what a Leader is built on: the job's handles, clock and
// hooks.
type Config struct {
	Store  store.Store
	Paths  layout.JobPaths
	Job    string // the job's name
	Server string // this server's id
	Log    *slog.Logger
	Cache  *treecache.Cache
	Tx     txn.Committer
	Nodes  *jobnodes.Nodes
	// Mu is the job's mutex; it guards the leader's bookkeeping (the live
	// set and total last seen, and the last reshard's) beside the job's
	// own state.
	Mu *sync.Mutex
	// Signals, when not nil, receives the tests' Resharded events.
	Signals *testsignal.Coord
	// Now is the local clock; OfflineGrace how long an offline server's
	// node is kept (RegistryConfig.OfflineServerGrace).
	Now          func() time.Time
	OfflineGrace time.Duration
	Hooks
}

// Leader is the leader duties of one job on this server. Reshard and
// ReshardWhenIdle run on a Begin or the watcher; Duties and Reconcile, the
// watcher's, run on the watcher alone (one step at a time).
type Leader struct {
	st           store.Store
	p            layout.JobPaths
	jname        string
	id           string
	log          *slog.Logger
	cache        *treecache.Cache
	tx           txn.Committer
	nodes        *jobnodes.Nodes
	signals      *testsignal.Coord
	now          func() time.Time
	offlineGrace time.Duration
	Hooks

	// reshardMu orders the leader's resharding commit against the watcher's
	// decision to raise the flag: without it the watcher could judge a
	// membership change against the previous reshard and raise the flag
	// just after a reshard that already applied the change, so the flag
	// stays up for a run that started in between. Lock order: reshardMu,
	// then mu.
	reshardMu sync.Mutex
	// mu is the job's: it guards lastLive, lastTotal and shardedLive, the
	// live set and total last seen by the watcher, and "live/total" as the
	// last reshard used them.
	mu          *sync.Mutex
	lastLive    string
	lastTotal   int
	shardedLive string
	// offlineSeen: when a server was first seen offline (Reconcile).
	offlineSeen map[string]time.Time
	// departed are the servers the cache showed without a status node at
	// the leader's last check (watcher only; newlyDeparted).
	departed []string
	// FlagRaised: the join (or the watcher's re-registration on a new
	// session) raised the resharding flag just before its election, whose
	// leader duties need not raise it again. Set and read by the join
	// and the watcher (one at a time).
	FlagRaised bool
}

// New returns the leader duties of the job c describes.
func New(c Config) *Leader {
	return &Leader{
		st: c.Store, p: c.Paths, jname: c.Job, id: c.Server, log: c.Log, cache: c.Cache, tx: c.Tx, nodes: c.Nodes,
		signals: c.Signals, now: c.Now, offlineGrace: c.OfflineGrace, Hooks: c.Hooks,
		mu: c.Mu, offlineSeen: make(map[string]time.Time),
	}
}

// SetLastTotalLocked records the total the job runs on after its join
// (the watcher's last seen total); the caller holds the job's mu, or no
// other goroutine sees the job yet.
func (l *Leader) SetLastTotalLocked(total int) { l.lastTotal = total }

// event names this job and server in a test signal.
func (l *Leader) event() testsignal.Event { return testsignal.Event{Job: l.jname, Server: l.id} }

// Reshard is the leader's resharding: wait until no item runs, then in ONE
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
func (l *Leader) Reshard(ctx context.Context, cfg jobconfig.Config) error {
	if !cfg.MonitorsExecution() {
		return l.reshardNow(ctx, cfg, nil)
	}
	nec := l.p.Abs(layout.RelNecessary)
	for {
		ok, _, necW, err := l.st.ExistsW(ctx, nec)
		if err != nil {
			return fmt.Errorf("coord: job %q: read %s: %w", l.jname, nec, err)
		}
		if !ok {
			return nil // resharded meanwhile
		}
		var watch <-chan store.Event
		running, found, listed, err := l.firstRunning(ctx, recipe.ChanExists(l.st, &watch))
		if err != nil {
			return err
		}
		if !found {
			return l.reshardNow(ctx, cfg, listed)
		}
		select {
		case <-watch:
		case <-necW:
		case <-ctx.Done():
			return fmt.Errorf("coord: job %q: waiting for the run of server %s to finish before resharding: %w", l.jname, running, ctx.Err())
		}
	}
}

// ReshardWhenIdle is the leader watcher's prompt resharding: when the flag
// is set and no item runs, it reshards at once, so that servers waiting in
// Begin do not depend on the leader's next trigger (a trigger-only job may
// have none for a long time). While a run goes on it never reshards: it
// arms a watch on that server's live marker (watch) and returns waiting,
// and the watcher calls it again when the watch fires. It never blocks on
// a run.
func (l *Leader) ReshardWhenIdle(ctx context.Context, watch recipe.ExistsWatch) (waiting bool, _ error) {
	if !l.IsLeader() || !l.cache.Has(layout.RelNecessary) || l.cache.Has(layout.RelProcessing) {
		return false, nil
	}
	if _, _, err := l.Ready(); err != nil {
		return false, nil // not registered or refusing runs: Begin reshards later
	}
	// The cache shows the flag as a listing found it, or newer: this
	// leader's own reshards are written through. One it has not seen
	// cleared (another leader's) makes the reshard's Multi fail on the
	// flag's delete, and reshardNow then leaves it: no read of the flag
	// first.
	cfg := l.Config()
	var listed *serverListing
	if cfg.MonitorsExecution() {
		_, found, l2, err := l.firstRunning(ctx, watch)
		if err != nil || found {
			return found, err
		}
		listed = l2
	}
	return false, l.reshardNow(ctx, cfg, listed)
}

// reshardNow writes the new assignment in one Multi; see reshard. The
// Multi checks the membership version (touchMembership) it planned on:
// when a server joined, left, or was disabled, enabled or shut down
// meanwhile, the Multi fails and the assignment is planned again on the
// new membership, so the flag is never cleared by a plan that missed one.
//
// listed, when not nil, is a direct listing of the servers made just
// before (firstRunning's): the first attempt plans on it instead of
// listing them again.
func (l *Leader) reshardNow(ctx context.Context, cfg jobconfig.Config, listed *serverListing) error {
	strategy, err := sharding.Lookup(cfg.ShardingStrategy)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", layout.ErrBadConfig, l.p.Config("jobShardingStrategy"), err)
	}
	l.reshardMu.Lock()
	defer l.reshardMu.Unlock()
	for attempt := 1; ; attempt++ {
		// The membership version comes with the listing (one read): the
		// Multi's check of it refuses a plan that missed a change made
		// after the listing.
		var (
			servers map[string]bool
			live    []string
			members int32
		)
		if attempt == 1 && listed != nil {
			servers, live, members, err = l.nodes.ReadListedServers(ctx, listed.names, listed.stat)
		} else {
			servers, live, members, err = l.nodes.ReadServers(ctx)
		}
		if err != nil {
			return err
		}
		// The total is read directly too, and checked in the Multi: cfg may
		// be a Begin's snapshot from before an edit of the total whose
		// resharding flag this reshard clears (it left the old items
		// assigned for good: simulation seed 109573).
		total, totalCheck, err := l.nodes.ReadTotal(ctx, cfg.ShardingTotalCount)
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
		for _, w := range PlanSharding(strategy, live, l.jname, total, servers) {
			k := txn.Create
			if w.Exists {
				k = txn.Set
			}
			ins = append(ins, txn.Intent{Kind: k, Rel: layout.RelServer(w.Server, layout.NSharding), Data: w.Items})
		}
		for _, q := range QueuePrunes(l.cache.Children(layout.RelFailoverQ), total) {
			ins = append(ins, txn.Intent{Kind: txn.DeleteIfPresent, Rel: layout.RelFailoverQ + "/" + q})
		}
		ins = append(ins,
			txn.Intent{Kind: txn.Delete, Rel: layout.RelNecessary},
			txn.Intent{Kind: txn.Delete, Rel: layout.RelProcessing})
		err = l.tx.Commit(ctx, ins)
		if errors.Is(err, store.ErrBadVersion) && attempt < layout.WriteAttempts {
			l.log.Debug("membership changed while resharding; planning again")
			continue
		}
		if err != nil {
			if errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrNodeExists) {
				// Another leader incarnation resharded, or a server node
				// vanished: re-read through the cache and go again.
				return nil
			}
			return fmt.Errorf("coord: job %q: reshard: %w", l.jname, err)
		}
		l.Resharded(live, total, "leader")
		l.PruneItemsBeyond(ctx, total)
		l.SignalResharded(live, total) // after the prune: the reshard is over
		return nil
	}
}

// serverListing is a direct listing of the servers and its Stat.
type serverListing struct {
	names []string
	stat  store.Stat
}

// ShardingWrite is one server's sharding node as a reshard writes it.
type ShardingWrite struct {
	Server string
	Items  []byte // layout.FormatItems of its items
	Exists bool   // its sharding node exists: set, not created
}

// PlanSharding is a reshard's plan, for the leader's reshard and a lone
// join's alike: the strategy's assignment of total items over the live
// servers, written to the sharding node of every server of servers (true:
// its node exists), in server order.
func PlanSharding(strategy sharding.Strategy, live []string, job string, total int, servers map[string]bool) []ShardingWrite {
	assign := strategy.Shard(live, job, total)
	out := make([]ShardingWrite, 0, len(servers))
	for _, s := range slices.Sorted(maps.Keys(servers)) {
		out = append(out, ShardingWrite{Server: s, Items: layout.FormatItems(assign[s]), Exists: servers[s]})
	}
	return out
}

// Resharded records a committed reshard's membership and total (the
// leader's bookkeeping, raiseIfMembershipChanged) and logs it; by says
// whose it was (the leader's, or a lone join's).
func (l *Leader) Resharded(live []string, total int, by string) {
	l.mu.Lock()
	l.shardedLive = ShardedAs(live, total)
	l.mu.Unlock()
	l.log.Info("resharded", "servers", live, "total", total, "by", by)
}

// SignalResharded tells the tests of a reshard that is over.
func (l *Leader) SignalResharded(live []string, total int) {
	if s := l.signals; s != nil {
		s.Resharded.Send(testsignal.Resharded{Event: l.event(), Servers: slices.Clone(live), Total: total})
	}
}

// QueuePrunes names the entries of the failover directory (its listing,
// names) that a reshard to total deletes: queue entries of items beyond it
// or malformed, and the claim records of items beyond it. Such an item is
// pruned after the reshard, claim and all (pruneItemsBeyond): the claim is
// dropped, not lost, and a total raised again must not queue it anew. A
// claim's record otherwise goes with its claim (claimrecord.go).
func QueuePrunes(names []string, total int) []string {
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

// PruneItemsBeyond removes the execution nodes of items beyond a lowered
// total that Admin.SetConfig left because they were running then. The
// leader calls it after resharding, when none of them runs any more.
// Failures are logged: the nodes are only clutter, never read by runs. The
// items are listed from the tree cache (which watches the execution node):
// a listing of the store on every reshard cost a read per job start; one
// the cache has not seen yet is pruned at the next reshard.
func (l *Leader) PruneItemsBeyond(ctx context.Context, total int) {
	for _, n := range l.cache.Children(layout.NExecution) {
		if it, ok := layout.ParseItemName(n); ok && it >= total {
			if err := layout.PruneItem(ctx, l.st, l.p, it); err != nil {
				l.Warn(ctx, "cannot prune item beyond the total", "item", it, "total", total, "err", err)
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
//
// The servers' listing it read goes with the answer (listed): a reshard
// planned when none runs plans on it, as on its own listing, and its Multi
// checks the membership version read with it.
func (l *Leader) firstRunning(ctx context.Context, watch recipe.ExistsWatch) (server string, found bool, listed *serverListing, _ error) {
	servers, sst, err := l.nodes.ListServers(ctx)
	if err != nil {
		return "", false, nil, err
	}
	listed = &serverListing{names: servers, stat: sst}
	// The markers read side by side (one round trip, not one per server),
	// then taken in the listing's order.
	type marker struct {
		ok  bool
		st  store.Stat
		err error
	}
	markers := make([]marker, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			m := &markers[i]
			m.ok, m.st, m.err = l.st.Exists(ctx, l.p.Server(s, layout.NRun, layout.NLive))
		})
	}
	wg.Wait()
	for i, s := range servers {
		p := l.p.Server(s, layout.NRun, layout.NLive)
		ok, st, err := markers[i].ok, markers[i].st, markers[i].err
		if err == nil && ok && !(s == l.id && l.MarkerLeftByEndedRun(st)) {
			// Watch only the marker found; scan again when it goes.
			ok, st, err = watch(ctx, p)
		}
		if err != nil {
			return "", false, nil, fmt.Errorf("coord: job %q: read %s: %w", l.jname, p, err)
		}
		if ok && s == l.id && l.MarkerLeftByEndedRun(st) {
			// Left by a run of this server that no longer holds it (a
			// Begin whose reply was lost, a Complete refused while the
			// session was suspended), on a session that resumed: only
			// this server's next Begin would remove it, and that Begin
			// waits for this reshard (ZooKeeper simulation seed 900184).
			// Versioned, as in Begin.
			if err := l.st.Delete(ctx, p, st.Version); err == nil || errors.Is(err, store.ErrNoNode) {
				l.log.Info("removed the live marker left by an earlier run of this server before resharding")
				continue
			}
		}
		if ok {
			return s, true, listed, nil
		}
	}
	return "", false, listed, nil
}

// Duties raises the resharding flag when the set of live servers
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
func (l *Leader) Duties(ctx context.Context, force bool) {
	live := l.nodes.LiveServers()
	departed := l.newlyDeparted()
	total := l.Config().ShardingTotalCount
	l.reshardMu.Lock()
	raised := l.raiseIfMembershipChanged(ctx, live, total, force)
	l.reshardMu.Unlock()
	if raised || departed {
		l.EnqueueOrphans(ctx)
	}
}

// newlyDeparted records the servers the cache shows without a status node
// and reports whether one of them was not so at the previous call.
func (l *Leader) newlyDeparted() bool {
	var gone []string
	for _, s := range l.cache.Children(layout.NServers) {
		if !jobnodes.CachedServerState(l.cache, s).Online {
			gone = append(gone, s)
		}
	}
	var news []string
	for _, s := range gone {
		if !slices.Contains(l.departed, s) {
			news = append(news, s)
		}
	}
	l.departed = gone
	if len(news) > 0 {
		// The start of a failover, for operators and for the failover
		// benchmark's timeline (integration/faults).
		l.log.Info("servers went offline", "servers", news)
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
func (l *Leader) raiseIfMembershipChanged(ctx context.Context, live []string, total int, force bool) bool {
	cur := strings.Join(live, ",")
	l.mu.Lock()
	last, lastTotal, sharded := l.lastLive, l.lastTotal, l.shardedLive
	l.lastLive, l.lastTotal = cur, total
	l.mu.Unlock()
	if !force && sharded == ShardedAs(live, total) {
		// The last reshard (which reads the servers directly) already
		// used exactly this membership: a change seen late here.
		return false
	}
	// A cache view that differs from the last reshard's counts as a change
	// even when the cache itself saw none: a server the reshard used may
	// have died before the cache ever saw it live.
	changed := last != "" && (last != cur || total != lastTotal) ||
		sharded != "" && sharded != ShardedAs(live, total)
	if !force && !changed {
		return false
	}
	if !force && l.cache.Has(layout.RelNecessary) {
		// The flag is up already (a joiner raises it in its registration's
		// transaction): the reshard it asks for reads the servers directly
		// and checks the membership version, so neither the confirming read
		// nor a second raise is needed (they cost a joined job's leader
		// 2N+2 requests per joiner). The change is judged again once the
		// cache shows the flag down: after this leader's reshard (its
		// committed delete is written through, and Resharded records what
		// it used) or anyone else's, when last is still what it was here.
		l.mu.Lock()
		l.lastLive, l.lastTotal = last, lastTotal
		l.mu.Unlock()
		return true
	}
	if !force {
		// The cache told of a change; the decision rests on a direct read,
		// as the reshard's own: a cache that has not yet seen a join the
		// last reshard used would otherwise raise a spurious flag, which
		// holds every Begin until the runs begun meanwhile complete.
		_, direct, _, err := l.nodes.ReadServers(ctx)
		if err != nil {
			l.Warn(ctx, "cannot read the servers to confirm a membership change; raising the resharding flag", "err", err)
		} else if sharded == ShardedAs(direct, total) {
			return false
		}
	}
	if l.FlagRaised {
		// The join or re-registration raised it just before, after this
		// server's registration: a second raise would cost a write per
		// job start (10,000 jobs in a process, issue 15).
		return true
	}
	if err := layout.RaiseFlag(ctx, l.st, l.p); err != nil {
		l.Warn(ctx, "cannot raise the resharding flag", "err", err)
	}
	return true
}

// owners maps each item to the server whose sharding node lists it.
func (l *Leader) owners() map[int]string {
	own := make(map[int]string)
	for _, s := range l.cache.Children(layout.NServers) {
		d, _, ok := l.cache.Get(layout.RelServer(s, layout.NSharding))
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

// Reconcile is the leader's periodic check: an item owned by an offline or
// disabled server, or by no one, raises the resharding flag; offline server
// nodes older than the grace are pruned (operator-disabled ones are kept).
func (l *Leader) Reconcile(ctx context.Context) {
	cfg := l.Config()
	live := l.nodes.LiveServers()
	if len(live) > 0 {
		own := l.owners()
		for it := range cfg.ShardingTotalCount {
			s, ok := own[it]
			if !ok || !slices.Contains(live, s) {
				l.log.Info("reconcile: item has no live owner; resharding", "item", it, "owner", s)
				if err := layout.RaiseFlag(ctx, l.st, l.p); err != nil {
					l.Warn(ctx, "cannot raise the resharding flag", "err", err)
				}
				break
			}
		}
	}
	now := l.now()
	for _, s := range l.cache.Children(layout.NServers) {
		if jobnodes.CachedServerState(l.cache, s).Online {
			delete(l.offlineSeen, s)
			continue
		}
		since, ok := l.offlineSeen[s]
		if !ok {
			l.offlineSeen[s] = now
			continue
		}
		if now.Sub(since) < l.offlineGrace {
			continue
		}
		if d, _, ok := l.cache.Get(layout.RelServer(s, layout.NDisabled)); ok && layout.FlagTrue(d) {
			continue
		}
		l.log.Info("pruning offline server", "offline-server", s, "since", since)
		if err := store.DeleteAll(ctx, l.st, l.p.Server(s)); err != nil {
			l.Warn(ctx, "cannot prune offline server", "offline-server", s, "err", err)
			continue
		}
		delete(l.offlineSeen, s)
	}
	l.EnqueueOrphans(ctx)
}

// ShardedAs is the "live/total" key a reshard records (Leader.shardedLive).
func ShardedAs(live []string, total int) string {
	return strings.Join(live, ",") + "/" + strconv.Itoa(total)
}

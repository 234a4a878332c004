// Package failover holds a job's failover on this server: the leader's
// scan that queues a dead server's unfinished items (EnqueueOrphans), the
// claim of a queued item under the failover latch (Claim), the claims this
// server holds, taken by its runs or given back (ReleaseClaims), a claim
// whose transaction's reply was lost (claimsettle.go), and this server's
// view of its items' claims and failover marks (view.go).
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// Hooks are what failover asks of the job it serves.
type Hooks struct {
	// Config returns the job's current config.
	Config func() jobconfig.Config
	// Ready checks the preconditions of a Begin and returns the
	// registration's session: a claim is for a server that may run.
	Ready func() (int64, context.Context, error)
	// RegSessionLocked returns the registration's session; the caller
	// holds the job's mu.
	RegSessionLocked func() int64
	// Kick wakes the job's watcher (to watch a claimed item).
	Kick func()
	// Warn logs a failure of the watcher's work (at Debug once ctx ended).
	Warn func(ctx context.Context, msg string, args ...any)
}

// Config is what a Failover is built on: the job's handles and hooks.
type Config struct {
	Store  store.Store
	Paths  layout.JobPaths
	Job    string // the job's name
	Server string // this server's id
	Log    *slog.Logger
	Cache  *treecache.Cache
	Tx     txn.Committer
	Nodes  *jobnodes.Nodes
	// Mu is the job's mutex: it guards the claims and the view.
	Mu *sync.Mutex
	// Signals, when not nil, receives the tests' failover events.
	Signals *testsignal.Coord
	Hooks
}

// Failover is a job's failover on this server. Its claims and view are
// guarded by the job's mu; Claim, like Begin, is called by one goroutine
// at a time, EnqueueOrphans by the watcher.
type Failover struct {
	st      store.Store
	p       layout.JobPaths
	jname   string
	id      string
	log     *slog.Logger
	cache   *treecache.Cache
	tx      txn.Committer
	nodes   *jobnodes.Nodes
	signals *testsignal.Coord
	Hooks

	mu     *sync.Mutex
	claims map[int]int64 // failover items claimed, to their epoch
	// claimsTaken are the claims a Begin took for its run (until Complete):
	// a Begin beside that run (the Node runs failover beside a busy run)
	// must not take them again.
	claimsTaken map[int]bool
	// claimsUnsure are the items whose claim transaction failed on the
	// connection (a reply lost: it may have been applied), to the session
	// it was made on: resolved by a direct read before the next claim or
	// Begin (claimsettle.go).
	claimsUnsure map[int]int64
	// foView is the failover directory version (with the sharding node's
	// Mzxid and the registration) at which this server last read its
	// items' claims and failover marks directly: while Begin reads the
	// same, the cache's are current (ViewAt).
	foView  failoverView
	foItems map[int]ItemView
}

// New returns the failover of the job c describes.
func New(c Config) *Failover {
	return &Failover{
		st: c.Store, p: c.Paths, jname: c.Job, id: c.Server, log: c.Log, cache: c.Cache, tx: c.Tx, nodes: c.Nodes,
		signals: c.Signals, Hooks: c.Hooks, mu: c.Mu, claims: make(map[int]int64),
	}
}

// event names this job and server in a test signal.
func (f *Failover) event() testsignal.Event { return testsignal.Event{Job: f.jname, Server: f.id} }

// ForgetLocked forgets every claim, for a lost registration (its claims
// went with its session); the caller holds the job's mu.
func (f *Failover) ForgetLocked() {
	f.claims = make(map[int]int64)
	f.claimsTaken = nil
	f.claimsUnsure = nil
}

// Forget forgets the claim on item (its failover node is gone).
func (f *Failover) Forget(item int) {
	f.mu.Lock()
	delete(f.claims, item)
	f.mu.Unlock()
}

// Ended forgets the claims of a run's failover items, taken and all.
func (f *Failover) Ended(items []int) {
	f.mu.Lock()
	for _, it := range items {
		delete(f.claims, it)
		delete(f.claimsTaken, it)
	}
	f.mu.Unlock()
}

// Untaken returns the claims (item to epoch) no run has taken, and drops
// from them those cfg no longer allows (dropped: the caller deletes their
// failover nodes, DropClaimNode): items beyond the total, and every claim
// when failover or monitorExecution is off.
func (f *Failover) Untaken(cfg jobconfig.Config) (claims, dropped map[int]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.claims) == 0 {
		return nil, nil // every Begin of a server that claimed nothing
	}
	claims = make(map[int]int64, len(f.claims))
	dropped = make(map[int]int64)
	for k, v := range f.claims {
		switch {
		case f.claimsTaken[k]:
		case k >= cfg.ShardingTotalCount:
			// The total was lowered below it since the claim: the item
			// is gone, and running it would run it again (simulation
			// seed 2000169). The claim is dropped.
			delete(f.claims, k)
			dropped[k] = v
		case !jobnodes.FailoverOn(cfg):
			// Failover or monitorExecution went off since the claim: its
			// owner runs the item at its next trigger without looking
			// for a claim (with monitorExecution off nothing would stop
			// the two runs side by side: simulation seed 3002508).
			delete(f.claims, k)
			dropped[k] = v
		default:
			claims[k] = v
		}
	}
	return claims, dropped
}

// EnqueueOrphans is the leader's failover detection: a server that went
// offline leaving a run record without completion and without its live
// marker (the marker is ephemeral: its session is gone, the run with it),
// whose sharding node is still the one the run was planned on (after a
// reshard the items' new owners run them anyway), crashed mid-run: the
// record's items (within the total) are queued under
// leader/failover/items, and the record is marked queued, in one
// transaction fenced by the versions of its sharding node and record and
// bumping the failover directory's version. Each entry is the crashed
// run's token: the run that re-runs the item (a claim's failover run, or
// the item's owner's next normal run) consumes it, so a cut run runs again
// once. A failover claim whose claimant's session ended (its record
// without its ephemeral claim) is queued again too (requeueLostClaims). It
// reads the tree directly (the cache may lag right after a crash); it runs
// only on departures, on election and on reconcile ticks: a few reads per
// server and per claim record, none per item.
func (f *Failover) EnqueueOrphans(ctx context.Context) {
	cfg := f.Config()
	if !jobnodes.FailoverOn(cfg) {
		return
	}
	orphans, listing, err := f.findOrphans(ctx, cfg.ShardingTotalCount)
	if err != nil {
		f.Warn(ctx, "failover scan failed", "err", err)
		return
	}
	f.requeueLostClaims(ctx, listing, cfg.ShardingTotalCount)
	for _, o := range orphans {
		head := []txn.Intent{
			{Kind: txn.Check, Rel: layout.RelServer(o.server, layout.NSharding), Version: o.shardVersion},
			{Kind: txn.Check, Rel: layout.RelServer(o.server, layout.NRun), Version: o.recVersion},
			BumpDir(),
		}
		groups := make([][]txn.Intent, 0, len(o.items))
		for _, it := range o.items {
			groups = append(groups, []txn.Intent{{Kind: txn.Create, Rel: layout.RelFailoverQ + "/" + strconv.Itoa(it)}})
		}
		rec := o.rec
		rec.Queued = true
		tail := []txn.Intent{{Kind: txn.Set, Rel: layout.RelServer(o.server, layout.NRun), Data: layout.EncodeRunRecord(rec)}}
		// Beyond the store's request limit in parts (txn.Committer.CommitSplit): each part
		// fenced by the same checks, the record marked in the last.
		if _, err := f.tx.CommitSplit(ctx, head, groups, tail); err != nil {
			f.Warn(ctx, "cannot queue items for failover", "offline-server", o.server, "items", o.items, "err", err)
			continue
		}
		f.log.Info("queued crashed items for failover", "offline-server", o.server, "items", o.items)
		if s := f.signals; s != nil {
			s.FailoverQueued.Send(testsignal.Queued{Event: f.event(), Items: o.items})
		}
	}
}

// lostClaim is a claim record whose claim (the ephemeral
// execution/{item}/failover) is gone: its claimant's session ended.
type lostClaim struct {
	item    int
	version int32
	server  string
}

// requeueLostClaims queues again the items of claim records whose claim is
// gone (claimrecord.go): the claimant's session ended mid failover run (or
// before its run began), and nothing else would run the item before its
// owner's next normal Begin. Per item, in transactions bumping the failover
// directory's version (a Begin planned before fails and plans again): the
// record deleted (checked at the version read), the queue entry created,
// the claim's absence asserted (created and deleted: a new claim can only
// come from a queue entry, and this one is not there yet, so this is the
// record's own claim, gone) and the item's failover mark set (the
// container's data, Done): the owner's next epoch rises above the
// lost claim's, so epochs only grow even when the owner, not a new claim,
// re-runs the item. A record of an item beyond the total is only deleted.
// Split beyond the request limit: every item's operations are independent.
func (f *Failover) requeueLostClaims(ctx context.Context, listing layout.FoListing, total int) {
	if len(listing.Claims) == 0 {
		return
	}
	lost, err := f.findLostClaims(ctx, listing)
	if err != nil {
		f.Warn(ctx, "cannot read failover claims", "err", err)
		return
	}
	if len(lost) == 0 {
		return
	}
	// The stored config decides, and the transactions check the version
	// it was read at: an operator's edit (failover or monitorExecution
	// off, a lowered total) deletes claims itself, and what it deleted is
	// not a claim lost (simulation seed 9424199: a claim pruned with its
	// item beyond a lowered total was queued again once the total rose).
	cfgVersion, cfg, err := f.nodes.StoredConfig(ctx)
	if err != nil {
		f.Warn(ctx, "cannot read the config to queue lost failover claims", "err", err)
		return
	}
	if !jobnodes.FailoverOn(cfg) {
		return
	}
	total = cfg.ShardingTotalCount
	head := []txn.Intent{BumpDir(), {Kind: txn.Check, Rel: layout.NConfig, Version: cfgVersion}}
	groups := make([][]txn.Intent, 0, len(lost))
	for _, c := range lost {
		g := []txn.Intent{
			{Kind: txn.Check, Rel: layout.RelClaim(c.item), Version: c.version},
			{Kind: txn.Delete, Rel: layout.RelClaim(c.item)},
		}
		if c.item < total {
			g = append(g,
				txn.Intent{Kind: txn.CreateIfAbsent, Rel: layout.RelFailoverQ + "/" + strconv.Itoa(c.item)},
				txn.Intent{Kind: txn.CreateIfAbsent, Rel: layout.RelItem(c.item)},
				txn.Intent{Kind: txn.Create, Rel: layout.RelItem(c.item, layout.NFailover), Mode: store.Ephemeral},
				txn.Intent{Kind: txn.Delete, Rel: layout.RelItem(c.item, layout.NFailover)},
				txn.Intent{Kind: txn.Set, Rel: layout.RelItem(c.item)})
		}
		groups = append(groups, g)
	}
	// All at once, else item by item: a record consumed by the owner's
	// Begin or completed meanwhile fails only its own transaction.
	done := lost
	if _, err := f.tx.CommitSplit(ctx, head, groups, nil); err != nil {
		done = nil
		for i, g := range groups {
			if _, err := f.tx.CommitSplit(ctx, head, [][]txn.Intent{g}, nil); err != nil {
				if !layout.Raced(err) {
					f.Warn(ctx, "cannot queue a lost failover claim again", "item", lost[i].item, "err", err)
				}
				continue
			}
			done = append(done, lost[i])
		}
	}
	var items []int
	for _, c := range done {
		f.log.Info("failover claim lost with its claimant's session: item queued again", "item", c.item, "claimant", c.server)
		if c.item < total {
			items = append(items, c.item)
		}
	}
	if s := f.signals; s != nil && len(items) > 0 {
		s.FailoverQueued.Send(testsignal.Queued{Event: f.event(), Items: items})
	}
}

// RequeueLostClaims is the scan's requeueLostClaims for the claim records
// of items whose claims are gone, for a Begin that found them among its
// own items: each item queued again with its failover mark raised, so the
// run that re-runs it (this Begin's next attempt, consuming the entry, or
// a claim of it) carries an epoch above the lost claim's.
func (f *Failover) RequeueLostClaims(ctx context.Context, items []int) {
	claims := make(map[int]bool, len(items))
	for _, it := range items {
		claims[it] = true
	}
	f.requeueLostClaims(ctx, layout.FoListing{Claims: claims}, 0)
}

// findLostClaims reads the claim records of listing and their claims
// (pipelined): those whose claim is gone.
func (f *Failover) findLostClaims(ctx context.Context, listing layout.FoListing) ([]lostClaim, error) {
	items := make([]int, 0, len(listing.Claims))
	for it := range listing.Claims {
		items = append(items, it)
	}
	slices.Sort(items)
	found := make([]*lostClaim, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i, it := range items {
		g.Go(func() error {
			held, _, err := f.st.Exists(gctx, f.p.Item(it, layout.NFailover))
			if err != nil || held {
				return err
			}
			data, st, err := f.st.Get(gctx, f.p.Claim(it))
			if errors.Is(err, store.ErrNoNode) {
				return nil // completed or consumed meanwhile
			}
			if err != nil {
				return err
			}
			found[i] = &lostClaim{item: it, version: st.Version, server: layout.DecodeClaimRecord(data).Server}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []lostClaim
	for _, c := range found {
		if c != nil {
			out = append(out, *c)
		}
	}
	return out, nil
}

// orphanRun is a crashed server's cut run the failover scan found.
type orphanRun struct {
	server       string
	shardVersion int32
	rec          layout.RunRecord
	recVersion   int32
	items        []int
}

// findOrphans reads, for every offline server given items, its sharding
// node, its run record and its live marker (a few reads per server), and
// the failover directory's listing, returned with them.
func (f *Failover) findOrphans(ctx context.Context, total int) ([]orphanRun, layout.FoListing, error) {
	servers, _, err := f.st.Children(ctx, f.p.Abs(layout.NServers))
	if err != nil {
		return nil, layout.FoListing{}, err
	}
	queued, _, err := f.st.Children(ctx, f.p.Abs(layout.RelFailoverQ))
	if err != nil {
		return nil, layout.FoListing{}, err
	}
	listing := layout.ParseFailoverDir(queued)
	// An item queued already or claimed (its claim record: if the claim
	// is lost, requeueLostClaims queues it) is not queued again.
	inQueue := make(map[int]bool, len(queued))
	for it := range listing.Queued {
		inQueue[it] = true
	}
	for it := range listing.Claims {
		inQueue[it] = true
	}
	var out []orphanRun
	for _, s := range servers {
		kids, _, err := f.st.Children(ctx, f.p.Server(s))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, layout.FoListing{}, err
		}
		if state := layout.ListedServerState(kids); state.Online || !state.Sharding || !slices.Contains(kids, layout.NRun) {
			continue // online, never given items, or never ran
		}
		data, recSt, err := f.st.Get(ctx, f.p.Server(s, layout.NRun))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, layout.FoListing{}, err
		}
		rec, derr := layout.DecodeRunRecord(data)
		if derr != nil || rec.Layout < layout.RecordLayout || rec.Complete != "" || rec.Queued || !rec.Monitor || len(rec.Items) == 0 {
			continue
		}
		// The marker lives while the run's session does (a server shut
		// down by an operator, or left, with its run still going).
		if live, _, err := f.st.Exists(ctx, f.p.Server(s, layout.NRun, layout.NLive)); err != nil {
			return nil, layout.FoListing{}, err
		} else if live {
			continue
		}
		owned, shardSt, err := f.st.Get(ctx, f.p.Server(s, layout.NSharding))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, layout.FoListing{}, err
		}
		// Only a run planned on the current assignment: Begins are fenced
		// by the sharding node's version, so after a reshard the items'
		// new owners (or claims of their own) run them, and a record from
		// before it is a previous assignment's run.
		if shardSt.Mzxid != rec.Epoch {
			continue
		}
		if _, perr := layout.ParseItems(owned); perr != nil {
			f.log.Warn("malformed sharding node skipped by the failover scan", "node", f.p.Server(s, layout.NSharding), "err", perr)
			continue
		}
		o := orphanRun{server: s, shardVersion: shardSt.Version, rec: rec, recVersion: recSt.Version}
		for _, it := range rec.Items {
			if it < total && !inQueue[it] {
				o.items = append(o.items, it)
			}
		}
		if len(o.items) > 0 {
			out = append(out, o)
		}
	}
	return out, listing, nil
}

// latchWait bounds how long a claim waits for another server's failover
// latch: it is held for one claim (a few requests), so a longer hold means
// its holder is stuck or gone, and the ephemeral goes with its session.
const latchWait = time.Second

// Claim claims one waiting failover item if failover is on and the
// queue is not empty (under the failover latch; when another server holds
// it, it waits up to a second for its release). True means an item is now
// assigned to this server and the Node should run at once.
//
// It takes leader/failover/latch (a recipe.TryLatch, waiting once for
// another claimant's release: the claimant takes ONE item, and the rest of
// the queue would otherwise wait for its next claim or for this server's
// next trigger, since the queue signal already came),
// claims the first queued item (execution/{item}/failover = me, queue entry
// deleted, ONE Multi) and releases the latch.
func (f *Failover) Claim(ctx context.Context) (bool, error) {
	sid, _, err := f.Ready()
	if err != nil {
		return false, err
	}
	// A claim of this server whose reply was lost is this claim's item.
	if adopted, err := f.SettleUnsureClaims(ctx, sid); err != nil || adopted {
		return adopted, err
	}
	if !jobnodes.FailoverOn(f.Config()) || layout.QueuedCount(f.cache.Children(layout.RelFailoverQ)) == 0 {
		return false, nil
	}
	if jobnodes.CachedFlag(f.cache, layout.RelServer(f.id, layout.NPaused)) {
		// A paused server runs nothing: its claim would hold the item
		// from every server until a resume (simulation seeds 229, 276).
		return false, nil
	}
	latch := recipe.NewTryLatch(f.st, f.p.Abs(layout.RelFailoverLock), []byte(f.id))
	if held, err := latch.AcquireWithin(ctx, latchWait); err != nil {
		return false, fmt.Errorf("coord: job %q: take %s: %w", f.jname, latch.Path(), err)
	} else if !held {
		return false, nil // another claim again: its end signals the queue anew
	}
	defer func() {
		if err := latch.Release(ctx); err != nil {
			f.log.Warn("cannot release the failover latch", "err", err)
		}
	}()
	// The stored config, read directly, decides (the snapshot above may
	// predate an edit), and the claim's transaction checks the config
	// node's version it was read at: an edit switching failover or
	// monitorExecution off meanwhile fails the claim (simulation seed
	// 3002508: an entry queued before monitorExecution went off was
	// claimed after, and the item ran twice side by side).
	cfgVersion, on, err := f.nodes.StoredFailoverOn(ctx)
	if err != nil || !on {
		return false, err
	}
	names, _, err := f.st.Children(ctx, f.p.Abs(layout.RelFailoverQ))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read the failover queue: %w", f.jname, err)
	}
	var queued []int
	for _, n := range names {
		if it, ok := layout.ParseItemName(n); ok {
			queued = append(queued, it)
		}
	}
	slices.Sort(queued)
	c := &failoverClaim{f: f, sid: sid, cfgVersion: cfgVersion}
	return c.firstOf(ctx, queued)
}

// failoverClaim is one ClaimFailover's claim, under the failover latch:
// it tries the queued items in order until one is claimed.
type failoverClaim struct {
	f   *Failover
	sid int64
	// cfgVersion is the config node's version the claim's transaction
	// checks; edits counts the config edits met by claim transactions.
	cfgVersion int32
	edits      int
}

// claimStep is what a claim's try of one item leads to.
type claimStep int

const (
	claimNext  claimStep = iota // the item is not claimable: try the next one
	claimAgain                  // the config was edited: try the item again
	claimDone                   // the item is claimed
	claimStop                   // stop claiming (with the error, if any)
)

// firstOf claims the first claimable item of queued.
func (c *failoverClaim) firstOf(ctx context.Context, queued []int) (bool, error) {
	for i := 0; i < len(queued); i++ {
		step, err := c.try(ctx, queued[i])
		switch step {
		case claimDone:
			return true, nil
		case claimStop:
			return false, err
		case claimAgain:
			i--
		}
	}
	return false, nil
}

// try claims item it in ONE transaction (claimOps).
//
// A disabled item needs no failover: it runs nowhere until enabled, then
// at its owner (simulation seed 3131645: a failover run of a disabled
// item, whose barrier registration counts for no set, was released by a
// set it had no part in); its entry is dropped. An item whose owner ran it
// since it was queued consumed the entry (the entry is the crashed run's
// token): the claim's delete of it fails then.
func (c *failoverClaim) try(ctx context.Context, it int) (claimStep, error) {
	f := c.f
	kids, _, err := f.st.Children(ctx, f.p.Item(it))
	noContainer := errors.Is(err, store.ErrNoNode)
	if err != nil && !noContainer {
		return claimStop, fmt.Errorf("coord: job %q: read %s: %w", f.jname, f.p.Item(it), err)
	}
	if slices.Contains(kids, layout.NDisabled) {
		if err := f.st.Delete(ctx, f.p.Queued(it), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return claimStop, fmt.Errorf("coord: job %q: drop stale failover entry %s: %w", f.jname, f.p.Queued(it), err)
		}
		return claimNext, nil
	}
	if _, err := f.st.Multi(ctx, c.claimOps(it, noContainer)...); err != nil {
		return c.failed(ctx, it, err)
	}
	if err := c.adopt(ctx, it); err != nil {
		return claimStop, err
	}
	return claimDone, nil
}

// claimOps claim item it: the queue entry consumed (the failover
// directory's version bumped), the ephemeral failover mark and the
// claim's persistent record (claimrecord.go: if this server's session
// ends before the run completes, the leader's scan finds the record
// without its claim and queues the item again at once), the item not
// disabled (an operator may disable it after the read: a node created
// and deleted in one Multi asserts its absence) and the config unedited.
func (c *failoverClaim) claimOps(it int, noContainer bool) []store.Op {
	f := c.f
	var ops []store.Op
	if noContainer {
		ops = append(ops, &store.CreateOp{Path: f.p.Item(it)})
	}
	return append(ops,
		&store.DeleteOp{Path: f.p.Queued(it), Version: store.AnyVersion},
		&store.SetOp{Path: f.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion},
		&store.CreateOp{Path: f.p.Item(it, layout.NFailover), Data: []byte(f.id), Mode: store.Ephemeral},
		&store.CreateOp{Path: f.p.Claim(it), Data: layout.EncodeClaimRecord(f.id, c.sid)},
		&store.CreateOp{Path: f.p.Item(it, layout.NDisabled)},
		&store.DeleteOp{Path: f.p.Item(it, layout.NDisabled), Version: store.AnyVersion},
		&store.CheckOp{Path: f.p.Abs(layout.NConfig), Version: c.cfgVersion},
	)
}

// failed decides what a failed claim transaction of item it leads to.
func (c *failoverClaim) failed(ctx context.Context, it int, err error) (claimStep, error) {
	f := c.f
	switch {
	case errors.Is(err, store.ErrBadVersion):
		// The config was edited since it was read: read it again and,
		// if failover is still allowed, try the item again (a few
		// times: a stream of edits leaves the entry for the next claim).
		if c.edits++; c.edits > 3 {
			return claimStop, nil
		}
		var on bool
		var rerr error
		if c.cfgVersion, on, rerr = f.nodes.StoredFailoverOn(ctx); rerr != nil || !on {
			return claimStop, rerr
		}
		return claimAgain, nil
	case errors.Is(err, store.ErrNodeExists):
		// Claimed already (or the container was created meanwhile):
		// read again at the next claim.
		return claimNext, nil
	case errors.Is(err, store.ErrNoNode):
		return claimNext, nil // consumed by a run of its owner, or claimed already
	}
	if txn.Ambiguous(f.st, err) {
		// Applied, perhaps, with its reply lost: the claim would live on
		// this session unknown to this server, and the item would run
		// nowhere (claimsettle.go).
		f.noteUnsureClaim(it, c.sid)
	}
	return claimStop, fmt.Errorf("coord: job %q: claim failover item %d: %w", f.jname, it, err)
}

// adopt takes claimed item it as this server's: its epoch (the failover
// mark's Czxid) kept, the cache told of the claim, the watcher kicked to
// watch the item.
func (c *failoverClaim) adopt(ctx context.Context, it int) error {
	f := c.f
	_, st, err := f.st.Exists(ctx, f.p.Item(it, layout.NFailover))
	if err != nil {
		f.noteUnsureClaim(it, c.sid) // claimed: its epoch is read again
		return fmt.Errorf("coord: job %q: read claimed item %d: %w", f.jname, it, err)
	}
	f.mu.Lock()
	f.claims[it] = st.Czxid
	f.mu.Unlock()
	f.cache.NoteDeleted(layout.RelFailoverQ + "/" + strconv.Itoa(it))
	f.cache.NoteCreated(layout.RelItem(it, layout.NFailover), layout.RelClaim(it))
	f.Kick() // the watcher starts watching the claimed item
	f.log.Info("claimed failover item", "item", it)
	return nil
}

// ReleaseClaims puts the failover items this server claimed and no run of
// it has taken back in the queue (failover node and its record deleted,
// queue entry created, one Multi per item), for a server that cannot run
// them (paused, or leaving).
// Failures are logged: an item whose claim stays is released by the next
// Begin, or freed with this server's session.
func (f *Failover) ReleaseClaims(ctx context.Context) {
	f.mu.Lock()
	var items []int
	for it := range f.claims {
		if !f.claimsTaken[it] {
			items = append(items, it)
		}
	}
	f.mu.Unlock()
	slices.Sort(items)
	for _, it := range items {
		// The claim's record goes with it (read directly: an operator's
		// clearing may have deleted it; a record that changed since the
		// read fails the transaction, read again).
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			var rec []store.Op
			if rec, err = f.claimRecordOps(ctx, it); err != nil {
				break
			}
			_, err = f.st.Multi(ctx, append(rec,
				&store.DeleteOp{Path: f.p.Item(it, layout.NFailover), Version: store.AnyVersion},
				&store.CreateOp{Path: f.p.Queued(it)},
				&store.SetOp{Path: f.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion})...)
			if errors.Is(err, store.ErrNodeExists) {
				// Queued again already: drop the claim alone.
				_, err = f.st.Multi(ctx, append(rec,
					&store.DeleteOp{Path: f.p.Item(it, layout.NFailover), Version: store.AnyVersion},
					&store.SetOp{Path: f.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion})...)
			}
			if len(rec) == 0 || !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
				break
			}
		}
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			f.log.Warn("cannot give a failover claim back to the queue", "item", it, "err", err)
			continue
		}
		f.mu.Lock()
		delete(f.claims, it)
		f.mu.Unlock()
		if err == nil {
			f.cache.NoteDeleted(layout.RelItem(it, layout.NFailover), layout.RelClaim(it))
			f.log.Info("failover claim given back to the queue (paused or leaving)", "item", it)
		}
	}
}

// claimRecordOps returns the delete of item's claim record, versioned as
// read directly, when it exists (none otherwise): for the writers that drop
// a claim of this server (a pause, failover off, an item beyond the total),
// whose transaction must take the record with the claim, or the leader
// would queue the item again for a claim that was not lost.
func (f *Failover) claimRecordOps(ctx context.Context, item int) ([]store.Op, error) {
	ok, st, err := f.st.Exists(ctx, f.p.Claim(item))
	if err != nil || !ok {
		return nil, err
	}
	return []store.Op{&store.DeleteOp{Path: f.p.Claim(item), Version: st.Version}}, nil
}

// DropClaimNode deletes item's failover node if it is this server's claim
// made at czxid (an edit may have cleared it and another server claimed the
// item since). Failures are logged: the node is ephemeral, and a failover
// Begin checks its claim's node.
func (f *Failover) DropClaimNode(ctx context.Context, item int, czxid int64) {
	p := f.p.Item(item, layout.NFailover)
	ok, st, err := f.st.Exists(ctx, p)
	if err == nil && ok && st.Czxid == czxid {
		// With its record (claimrecord.go), read again if it changed.
		for attempt := 0; attempt < 3; attempt++ {
			var rec []store.Op
			if rec, err = f.claimRecordOps(ctx, item); err != nil {
				break
			}
			_, err = f.st.Multi(ctx, append(rec, &store.DeleteOp{Path: p, Version: st.Version},
				&store.SetOp{Path: f.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion})...)
			if len(rec) == 0 || !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
				break
			}
		}
	}
	if err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
		f.log.Warn("cannot drop a failover claim", "item", item, "err", err)
		return
	}
	f.cache.NoteDeleted(layout.RelItem(item, layout.NFailover))
	f.log.Info("failover claim dropped: failover is off, or the item is beyond the total", "item", item)
}

// TakeClaims marks the claims of failover items taken by a run (or, with
// false, released).
func (f *Failover) TakeClaims(items []int, taken bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range items {
		if !taken {
			delete(f.claimsTaken, it)
			continue
		}
		if f.claimsTaken == nil {
			f.claimsTaken = make(map[int]bool)
		}
		f.claimsTaken[it] = true
	}
}

// ClaimTaken reports whether a run of this server has taken its failover
// claim on item.
func (f *Failover) ClaimTaken(item int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claimsTaken[item]
}

// Claimed reports whether this server holds a failover claim on item.
func (f *Failover) Claimed(item int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.claims[item]
	return ok
}

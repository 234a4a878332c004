package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// enqueueOrphans is the leader's failover detection: a server that went
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
func (j *Job) enqueueOrphans(ctx context.Context) {
	cfg := j.Config()
	if !jobnodes.FailoverOn(cfg) {
		return
	}
	orphans, listing, err := j.findOrphans(ctx, cfg.ShardingTotalCount)
	if err != nil {
		j.warn(ctx, "failover scan failed", "err", err)
		return
	}
	j.requeueLostClaims(ctx, listing, cfg.ShardingTotalCount)
	for _, o := range orphans {
		head := []txn.Intent{
			{Kind: txn.Check, Rel: layout.RelServer(o.server, layout.NSharding), Version: o.shardVersion},
			{Kind: txn.Check, Rel: layout.RelServer(o.server, layout.NRun), Version: o.recVersion},
			bumpFailoverDir(),
		}
		groups := make([][]txn.Intent, 0, len(o.items))
		for _, it := range o.items {
			groups = append(groups, []txn.Intent{{Kind: txn.Create, Rel: layout.RelFailoverQ + "/" + strconv.Itoa(it)}})
		}
		rec := o.rec
		rec.Queued = true
		tail := []txn.Intent{{Kind: txn.Set, Rel: layout.RelServer(o.server, layout.NRun), Data: layout.EncodeRunRecord(rec)}}
		// Beyond the store's request limit in parts (internal/txn/split.go): each part
		// fenced by the same checks, the record marked in the last.
		if _, err := j.tx.CommitSplit(ctx, head, groups, tail); err != nil {
			j.warn(ctx, "cannot queue items for failover", "offline-server", o.server, "items", o.items, "err", err)
			continue
		}
		j.log.Info("queued crashed items for failover", "offline-server", o.server, "items", o.items)
		if s := j.reg.cfg.TestSignals; s != nil {
			s.FailoverQueued.Send(testsignal.Queued{Event: j.event(), Items: o.items})
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
// container's data, failoverDone): the owner's next epoch rises above the
// lost claim's, so epochs only grow even when the owner, not a new claim,
// re-runs the item. A record of an item beyond the total is only deleted.
// Split beyond the request limit: every item's operations are independent.
func (j *Job) requeueLostClaims(ctx context.Context, listing layout.FoListing, total int) {
	if len(listing.Claims) == 0 {
		return
	}
	lost, err := j.findLostClaims(ctx, listing)
	if err != nil {
		j.warn(ctx, "cannot read failover claims", "err", err)
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
	cfgVersion, cfg, err := j.nodes.StoredConfig(ctx)
	if err != nil {
		j.warn(ctx, "cannot read the config to queue lost failover claims", "err", err)
		return
	}
	if !jobnodes.FailoverOn(cfg) {
		return
	}
	total = cfg.ShardingTotalCount
	head := []txn.Intent{bumpFailoverDir(), {Kind: txn.Check, Rel: layout.NConfig, Version: cfgVersion}}
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
	if _, err := j.tx.CommitSplit(ctx, head, groups, nil); err != nil {
		done = nil
		for i, g := range groups {
			if _, err := j.tx.CommitSplit(ctx, head, [][]txn.Intent{g}, nil); err != nil {
				if !layout.Raced(err) {
					j.warn(ctx, "cannot queue a lost failover claim again", "item", lost[i].item, "err", err)
				}
				continue
			}
			done = append(done, lost[i])
		}
	}
	var items []int
	for _, c := range done {
		j.log.Info("failover claim lost with its claimant's session: item queued again", "item", c.item, "claimant", c.server)
		if c.item < total {
			items = append(items, c.item)
		}
	}
	if s := j.reg.cfg.TestSignals; s != nil && len(items) > 0 {
		s.FailoverQueued.Send(testsignal.Queued{Event: j.event(), Items: items})
	}
}

// findLostClaims reads the claim records of listing and their claims
// (pipelined): those whose claim is gone.
func (j *Job) findLostClaims(ctx context.Context, listing layout.FoListing) ([]lostClaim, error) {
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
			held, _, err := j.st.Exists(gctx, j.p.Item(it, layout.NFailover))
			if err != nil || held {
				return err
			}
			data, st, err := j.st.Get(gctx, j.p.Claim(it))
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
func (j *Job) findOrphans(ctx context.Context, total int) ([]orphanRun, layout.FoListing, error) {
	servers, _, err := j.st.Children(ctx, j.p.Abs(layout.NServers))
	if err != nil {
		return nil, layout.FoListing{}, err
	}
	queued, _, err := j.st.Children(ctx, j.p.Abs(layout.RelFailoverQ))
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
		kids, _, err := j.st.Children(ctx, j.p.Server(s))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, layout.FoListing{}, err
		}
		if state := layout.ListedServerState(kids); state.Online || !state.Sharding || !slices.Contains(kids, layout.NRun) {
			continue // online, never given items, or never ran
		}
		data, recSt, err := j.st.Get(ctx, j.p.Server(s, layout.NRun))
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
		if live, _, err := j.st.Exists(ctx, j.p.Server(s, layout.NRun, layout.NLive)); err != nil {
			return nil, layout.FoListing{}, err
		} else if live {
			continue
		}
		owned, shardSt, err := j.st.Get(ctx, j.p.Server(s, layout.NSharding))
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
			j.log.Warn("malformed sharding node skipped by the failover scan", "node", j.p.Server(s, layout.NSharding), "err", perr)
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

// ClaimFailover claims one waiting failover item if failover is on and the
// queue is not empty (under the failover latch; when another server holds
// it, it waits up to a second for its release). True means an item is now
// assigned to this server and the Node should run at once.
//
// claimFailover takes leader/failover/latch (a recipe.TryLatch, waiting once for
// another claimant's release: the claimant takes ONE item, and the rest of
// the queue would otherwise wait for its next claim or for this server's
// next trigger, since the queue signal already came),
// claims the first queued item (execution/{item}/failover = me, queue entry
// deleted, ONE Multi) and releases the latch.
func (j *Job) ClaimFailover(ctx context.Context) (bool, error) {
	sid, _, err := j.ready()
	if err != nil {
		return false, err
	}
	// A claim of this server whose reply was lost is this claim's item.
	if adopted, err := j.settleUnsureClaims(ctx, sid); err != nil || adopted {
		return adopted, err
	}
	if !jobnodes.FailoverOn(j.Config()) || layout.QueuedCount(j.cache.Children(layout.RelFailoverQ)) == 0 {
		return false, nil
	}
	if jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NPaused)) {
		// A paused server runs nothing: its claim would hold the item
		// from every server until a resume (simulation seeds 229, 276).
		return false, nil
	}
	latch := recipe.NewTryLatch(j.st, j.p.Abs(layout.RelFailoverLock), []byte(j.id))
	if held, err := latch.AcquireWithin(ctx, latchWait); err != nil {
		return false, fmt.Errorf("coord: job %q: take %s: %w", j.jname, latch.Path(), err)
	} else if !held {
		return false, nil // another claim again: its end signals the queue anew
	}
	defer func() {
		if err := latch.Release(ctx); err != nil {
			j.log.Warn("cannot release the failover latch", "err", err)
		}
	}()
	// The stored config, read directly, decides (the snapshot above may
	// predate an edit), and the claim's transaction checks the config
	// node's version it was read at: an edit switching failover or
	// monitorExecution off meanwhile fails the claim (simulation seed
	// 3002508: an entry queued before monitorExecution went off was
	// claimed after, and the item ran twice side by side).
	cfgVersion, on, err := j.nodes.StoredFailoverOn(ctx)
	if err != nil || !on {
		return false, err
	}
	names, _, err := j.st.Children(ctx, j.p.Abs(layout.RelFailoverQ))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read the failover queue: %w", j.jname, err)
	}
	var queued []int
	for _, n := range names {
		if it, ok := layout.ParseItemName(n); ok {
			queued = append(queued, it)
		}
	}
	slices.Sort(queued)
	c := &failoverClaim{j: j, sid: sid, cfgVersion: cfgVersion}
	return c.firstOf(ctx, queued)
}

// failoverClaim is one ClaimFailover's claim, under the failover latch:
// it tries the queued items in order until one is claimed.
type failoverClaim struct {
	j   *Job
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
	j := c.j
	kids, _, err := j.st.Children(ctx, j.p.Item(it))
	noContainer := errors.Is(err, store.ErrNoNode)
	if err != nil && !noContainer {
		return claimStop, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Item(it), err)
	}
	if slices.Contains(kids, layout.NDisabled) {
		if err := j.st.Delete(ctx, j.p.Queued(it), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return claimStop, fmt.Errorf("coord: job %q: drop stale failover entry %s: %w", j.jname, j.p.Queued(it), err)
		}
		return claimNext, nil
	}
	if _, err := j.st.Multi(ctx, c.claimOps(it, noContainer)...); err != nil {
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
	j := c.j
	var ops []store.Op
	if noContainer {
		ops = append(ops, &store.CreateOp{Path: j.p.Item(it)})
	}
	return append(ops,
		&store.DeleteOp{Path: j.p.Queued(it), Version: store.AnyVersion},
		&store.SetOp{Path: j.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion},
		&store.CreateOp{Path: j.p.Item(it, layout.NFailover), Data: []byte(j.id), Mode: store.Ephemeral},
		&store.CreateOp{Path: j.p.Claim(it), Data: layout.EncodeClaimRecord(j.id, c.sid)},
		&store.CreateOp{Path: j.p.Item(it, layout.NDisabled)},
		&store.DeleteOp{Path: j.p.Item(it, layout.NDisabled), Version: store.AnyVersion},
		&store.CheckOp{Path: j.p.Abs(layout.NConfig), Version: c.cfgVersion},
	)
}

// failed decides what a failed claim transaction of item it leads to.
func (c *failoverClaim) failed(ctx context.Context, it int, err error) (claimStep, error) {
	j := c.j
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
		if c.cfgVersion, on, rerr = j.nodes.StoredFailoverOn(ctx); rerr != nil || !on {
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
	if ambiguous(j.st, err) {
		// Applied, perhaps, with its reply lost: the claim would live on
		// this session unknown to this server, and the item would run
		// nowhere (claimsettle.go).
		j.noteUnsureClaim(it, c.sid)
	}
	return claimStop, fmt.Errorf("coord: job %q: claim failover item %d: %w", j.jname, it, err)
}

// adopt takes claimed item it as this server's: its epoch (the failover
// mark's Czxid) kept, the cache told of the claim, the watcher kicked to
// watch the item.
func (c *failoverClaim) adopt(ctx context.Context, it int) error {
	j := c.j
	_, st, err := j.st.Exists(ctx, j.p.Item(it, layout.NFailover))
	if err != nil {
		j.noteUnsureClaim(it, c.sid) // claimed: its epoch is read again
		return fmt.Errorf("coord: job %q: read claimed item %d: %w", j.jname, it, err)
	}
	j.mu.Lock()
	j.claims[it] = st.Czxid
	j.mu.Unlock()
	j.cache.NoteDeleted(layout.RelFailoverQ + "/" + strconv.Itoa(it))
	j.cache.NoteCreated(layout.RelItem(it, layout.NFailover), layout.RelClaim(it))
	j.kick() // the watcher starts watching the claimed item
	j.log.Info("claimed failover item", "item", it)
	return nil
}

// releaseClaims puts the failover items this server claimed and no run of
// it has taken back in the queue (failover node and its record deleted,
// queue entry created, one Multi per item), for a server that cannot run
// them (paused, or leaving).
// Failures are logged: an item whose claim stays is released by the next
// Begin, or freed with this server's session.
func (j *Job) releaseClaims(ctx context.Context) {
	j.mu.Lock()
	var items []int
	for it := range j.claims {
		if !j.claimsTaken[it] {
			items = append(items, it)
		}
	}
	j.mu.Unlock()
	slices.Sort(items)
	for _, it := range items {
		// The claim's record goes with it (read directly: an operator's
		// clearing may have deleted it; a record that changed since the
		// read fails the transaction, read again).
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			var rec []store.Op
			if rec, err = j.claimRecordOps(ctx, it); err != nil {
				break
			}
			_, err = j.st.Multi(ctx, append(rec,
				&store.DeleteOp{Path: j.p.Item(it, layout.NFailover), Version: store.AnyVersion},
				&store.CreateOp{Path: j.p.Queued(it)},
				&store.SetOp{Path: j.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion})...)
			if errors.Is(err, store.ErrNodeExists) {
				// Queued again already: drop the claim alone.
				_, err = j.st.Multi(ctx, append(rec,
					&store.DeleteOp{Path: j.p.Item(it, layout.NFailover), Version: store.AnyVersion},
					&store.SetOp{Path: j.p.Abs(layout.RelFailoverQ), Version: store.AnyVersion})...)
			}
			if len(rec) == 0 || !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
				break
			}
		}
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			j.log.Warn("cannot give a failover claim back to the queue", "item", it, "err", err)
			continue
		}
		j.mu.Lock()
		delete(j.claims, it)
		j.mu.Unlock()
		if err == nil {
			j.cache.NoteDeleted(layout.RelItem(it, layout.NFailover), layout.RelClaim(it))
			j.log.Info("failover claim given back to the queue (paused or leaving)", "item", it)
		}
	}
}

// claimRecordOps returns the delete of item's claim record, versioned as
// read directly, when it exists (none otherwise): for the writers that drop
// a claim of this server (a pause, failover off, an item beyond the total),
// whose transaction must take the record with the claim, or the leader
// would queue the item again for a claim that was not lost.
func (j *Job) claimRecordOps(ctx context.Context, item int) ([]store.Op, error) {
	ok, st, err := j.st.Exists(ctx, j.p.Claim(item))
	if err != nil || !ok {
		return nil, err
	}
	return []store.Op{&store.DeleteOp{Path: j.p.Claim(item), Version: st.Version}}, nil
}

package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// enqueueOrphans is the leader's failover detection: an item whose owner
// (per sharding) is offline, that began (lastBeginTime) since that owner
// was given it but did not complete, and that nobody runs or has claimed,
// is queued under leader/failover/items. A claimer that dies leaves its
// item in the same state, so the item is queued again. A begin older than
// the owner's assignment is another server's run, not the owner's: see
// findOrphans. It reads the tree directly (the
// cache may lag right after a crash); it runs only on departures, on
// election and on reconcile ticks. One Multi for all items found (in parts
// beyond the store's request limit).
func (j *job) enqueueOrphans(ctx context.Context) {
	cfg := j.config()
	if !failoverOn(cfg) {
		return
	}
	items, err := j.findOrphans(ctx, cfg.ShardingTotalCount)
	if err != nil {
		j.warn(ctx, "failover scan failed", "err", err)
		return
	}
	if len(items) == 0 {
		return
	}
	ops := make([]store.Op, 0, len(items))
	for _, it := range items {
		ops = append(ops, &store.CreateOp{Path: j.p.queued(it)})
	}
	// Beyond the store's request limit in parts (split.go): each entry
	// stands alone, and a failed part leaves the items after it for the
	// next scan.
	if err := j.multiSplit(ctx, ops); err != nil {
		j.warn(ctx, "cannot queue items for failover", "items", items, "err", err)
		return
	}
	j.log.Info("queued crashed items for failover", "items", items)
	if s := j.reg.cfg.TestSignals; s != nil {
		s.FailoverQueued.Send(testsignal.Queued{Event: j.event(), Items: items})
	}
}

func (j *job) findOrphans(ctx context.Context, total int) ([]int, error) {
	servers, _, err := j.st.Children(ctx, j.p.abs(nServers))
	if err != nil {
		return nil, err
	}
	// Each candidate item with the Mzxid of the sharding node that gave
	// it to its offline owner (the lowest, should two list it).
	candidates := make(map[int]int64)
	for _, s := range servers {
		kids, _, err := j.st.Children(ctx, j.p.server(s))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if state := listedServerState(kids); state.online || !state.sharding {
			continue // online, or never given items
		}
		data, shardSt, err := j.st.Get(ctx, j.p.server(s, nSharding))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		owned, err := parseItems(data)
		if err != nil {
			j.log.Warn("malformed sharding node skipped by the failover scan", "node", j.p.server(s, nSharding), "err", err)
			continue
		}
		for _, it := range owned {
			if z, ok := candidates[it]; !ok || shardSt.Mzxid < z {
				candidates[it] = shardSt.Mzxid
			}
		}
	}
	queued, _, err := j.st.Children(ctx, j.p.abs(relFailoverQ))
	if err != nil {
		return nil, err
	}
	inQueue := make(map[int]bool, len(queued))
	for _, n := range queued {
		if it, ok := parseItemName(n); ok {
			inQueue[it] = true
		}
	}
	var check []int
	for it := range candidates {
		if it < total && !inQueue[it] {
			check = append(check, it)
		}
	}
	slices.Sort(check)
	// One children listing per item, pipelined (a crashed server of
	// thousands of items would otherwise cost as many sequential round
	// trips between its session's expiry and the queueing).
	orphan := make([]bool, len(check))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(itemReaders)
	for i, it := range check {
		g.Go(func() error {
			kids, _, err := j.st.Children(gctx, j.p.item(it))
			if errors.Is(err, store.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			// A disabled item runs nowhere, by failover neither.
			if !slices.Contains(kids, nLastBeginTime) || slices.Contains(kids, nCompleted) ||
				slices.Contains(kids, nRunning) || slices.Contains(kids, nFailover) || slices.Contains(kids, nDisabled) {
				return nil
			}
			// Only a begin since the owner was given the item is its run
			// (or a claimer's, which dies the same way): Begins are fenced
			// by the sharding node's version, so after the assignment only
			// the owner and claimers begin the item. An older begin is a
			// previous owner's run, which an edit of monitorExecution to
			// false (and back) stripped of its running node and a reshard
			// then moved while it went on: failing it over because its new
			// owner left ran the item twice side by side, and nothing had
			// crashed (simulation seed 6311095).
			ok, st, err := j.st.Exists(gctx, j.p.item(it, nLastBeginTime))
			if err != nil {
				return err
			}
			orphan[i] = ok && st.Mzxid > candidates[it]
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []int
	for i, it := range check {
		if orphan[i] {
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// latchWait bounds how long a claim waits for another server's failover
// latch: it is held for one claim (a few requests), so a longer hold means
// its holder is stuck or gone, and the ephemeral goes with its session.
const latchWait = time.Second

// claimFailover takes leader/failover/latch (a tryLatch, waiting once for
// another claimant's release: the claimant takes ONE item, and the rest of
// the queue would otherwise wait for its next claim or for this server's
// next trigger, since the queue signal already came),
// claims the first queued item (execution/{item}/failover = me, queue entry
// deleted, ONE Multi) and releases the latch.
func (j *job) claimFailover(ctx context.Context) (bool, error) {
	if _, _, err := j.ready(); err != nil {
		return false, err
	}
	if !failoverOn(j.config()) || len(j.cache.children(relFailoverQ)) == 0 {
		return false, nil
	}
	if j.cache.flag(relServer(j.id, nPaused)) {
		// A paused server runs nothing: its claim would hold the item
		// from every server until a resume (simulation seeds 229, 276).
		return false, nil
	}
	latch := tryLatch{st: j.st, path: j.p.abs(relFailoverLock), owner: []byte(j.id)}
	if held, err := latch.acquireWithin(ctx, latchWait); err != nil {
		return false, fmt.Errorf("coord: job %q: take %s: %w", j.jname, latch.path, err)
	} else if !held {
		return false, nil // another claim again: its end signals the queue anew
	}
	defer func() {
		if err := latch.release(ctx); err != nil {
			j.log.Warn("cannot release the failover latch", "err", err)
		}
	}()
	// The stored config, read directly, decides (the snapshot above may
	// predate an edit), and the claim's transaction checks the config
	// node's version it was read at: an edit switching failover or
	// monitorExecution off meanwhile fails the claim (simulation seed
	// 3002508: an entry queued before monitorExecution went off was
	// claimed after, and the item ran twice side by side).
	cfgVersion, on, err := j.storedFailoverOn(ctx)
	if err != nil || !on {
		return false, err
	}
	names, _, err := j.st.Children(ctx, j.p.abs(relFailoverQ))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read the failover queue: %w", j.jname, err)
	}
	var queued []int
	for _, n := range names {
		if it, ok := parseItemName(n); ok {
			queued = append(queued, it)
		}
	}
	slices.Sort(queued)
	edits := 0 // config edits met by claim transactions
	for i := 0; i < len(queued); i++ {
		it := queued[i]
		// An item that ran again since it was queued (its new owner after
		// a reshard completed it, or runs it now) needs no failover.
		kids, _, err := j.st.Children(ctx, j.p.item(it))
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.item(it), err)
		}
		// A disabled item needs none either: it runs nowhere until enabled,
		// then at its owner (simulation seed 3131645: a failover run of a
		// disabled item, whose barrier registration counts for no set, was
		// released by a set it had no part in).
		if slices.Contains(kids, nCompleted) || slices.Contains(kids, nRunning) || slices.Contains(kids, nDisabled) {
			if err := j.st.Delete(ctx, j.p.queued(it), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
				return false, fmt.Errorf("coord: job %q: drop stale failover entry %s: %w", j.jname, j.p.queued(it), err)
			}
			continue
		}
		ops := []store.Op{
			&store.DeleteOp{Path: j.p.queued(it), Version: store.AnyVersion},
			&store.CreateOp{Path: j.p.item(it, nFailover), Data: []byte(j.id), Mode: store.Ephemeral},
			// Nor running nor completed, in the transaction: its new
			// owner's Begin may have marked it running (or run and
			// completed it) since the read above, and the item would run
			// twice (simulation seed 135). A node created and deleted in
			// one Multi asserts its absence.
			&store.CreateOp{Path: j.p.item(it, nRunning), Mode: store.Ephemeral},
			&store.DeleteOp{Path: j.p.item(it, nRunning), Version: store.AnyVersion},
			&store.CreateOp{Path: j.p.item(it, nCompleted)},
			&store.DeleteOp{Path: j.p.item(it, nCompleted), Version: store.AnyVersion},
			&store.CreateOp{Path: j.p.item(it, nDisabled)},
			&store.DeleteOp{Path: j.p.item(it, nDisabled), Version: store.AnyVersion},
			&store.CheckOp{Path: j.p.abs(nConfig), Version: cfgVersion},
		}
		if _, err := j.st.Multi(ctx, ops...); err != nil {
			if errors.Is(err, store.ErrBadVersion) {
				// The config was edited since it was read: read it again
				// and, if failover is still allowed, try the item again
				// (a few times: a stream of edits leaves the entry for the
				// next claim).
				if edits++; edits > 3 {
					return false, nil
				}
				if cfgVersion, on, err = j.storedFailoverOn(ctx); err != nil || !on {
					return false, err
				}
				i--
				continue
			}
			if errors.Is(err, store.ErrNodeExists) {
				// Claimed already, or it ran again since it was queued:
				// either way the entry is stale.
				if err := j.st.Delete(ctx, j.p.queued(it), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
					return false, fmt.Errorf("coord: job %q: drop stale failover entry %s: %w", j.jname, j.p.queued(it), err)
				}
				continue
			}
			if errors.Is(err, store.ErrNoNode) {
				continue // claimed already, or its execution node is gone
			}
			return false, fmt.Errorf("coord: job %q: claim failover item %d: %w", j.jname, it, err)
		}
		_, st, err := j.st.Exists(ctx, j.p.item(it, nFailover))
		if err != nil {
			return false, fmt.Errorf("coord: job %q: read claimed item %d: %w", j.jname, it, err)
		}
		j.mu.Lock()
		j.claims[it] = st.Czxid
		j.mu.Unlock()
		j.cache.noteDeleted(relFailoverQ + "/" + strconv.Itoa(it))
		j.cache.noteCreated(relItem(it, nFailover))
		j.kick() // the watcher starts watching the claimed item
		j.log.Info("claimed failover item", "item", it)
		return true, nil
	}
	return false, nil
}

// failoverOn reports whether cfg allows failover: failover on, and
// monitorExecution on (without running and completed nodes nothing tells
// a claim that the item runs elsewhere or ran since: docs/configuration.md,
// "What monitorExecution = false gives up").
func failoverOn(cfg jobconfig.Config) bool { return cfg.Failover && cfg.MonitorsExecution() }

// storedFailoverOn reads the stored config directly (the config node's copy
// of the fields, else the field nodes) and reports failoverOn for it, with
// the config node's version it was read at (every edit bumps it in the
// same transaction as its fields). A config that does not decode allows
// nothing (the job stops on it anyway).
func (j *job) storedFailoverOn(ctx context.Context) (int32, bool, error) {
	data, st, err := j.st.Get(ctx, j.p.abs(nConfig))
	if err != nil {
		return 0, false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.abs(nConfig), err)
	}
	fields, ok := parseConfigCopy(data)
	if !ok {
		if fields, err = j.readConfigFields(ctx); err != nil {
			return 0, false, err
		}
	}
	cfg, err := j.decodeConfig(fields)
	if err != nil {
		return st.Version, false, nil
	}
	return st.Version, failoverOn(cfg), nil
}

// releaseClaims puts the failover items this server claimed and no run of
// it has taken back in the queue (failover node deleted, queue entry
// created, one Multi per item), for a server that cannot run them (paused).
// Failures are logged: an item whose claim stays is released by the next
// Begin, or freed with this server's session.
func (j *job) releaseClaims(ctx context.Context) {
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
		_, err := j.st.Multi(ctx,
			&store.DeleteOp{Path: j.p.item(it, nFailover), Version: store.AnyVersion},
			&store.CreateOp{Path: j.p.queued(it)})
		if errors.Is(err, store.ErrNodeExists) {
			// Queued again already: drop the claim alone.
			err = j.st.Delete(ctx, j.p.item(it, nFailover), store.AnyVersion)
		}
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			j.log.Warn("cannot give a failover claim back to the queue", "item", it, "err", err)
			continue
		}
		j.mu.Lock()
		delete(j.claims, it)
		j.mu.Unlock()
		if err == nil {
			j.cache.noteDeleted(relItem(it, nFailover))
			j.log.Info("paused: failover claim given back to the queue", "item", it)
		}
	}
}

// dropStaleClaims drops this server's failover claims among items whose
// item completed since the claim: a Begin of the item's owner that read no
// failover node just before the claim ran it (the claim asserts the item
// neither runs nor completed when it is made, so a completed node now is
// that run's). Running it again would be a second run for one crash.
func (j *job) dropStaleClaims(ctx context.Context, items []Assignment) {
	for _, a := range items {
		if !a.Failover {
			continue
		}
		done, _, err := j.st.Exists(ctx, j.p.item(a.Item, nCompleted))
		if err != nil || !done {
			continue
		}
		if err := j.st.Delete(ctx, j.p.item(a.Item, nFailover), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			j.log.Warn("cannot drop a stale failover claim", "item", a.Item, "err", err)
			continue
		}
		j.mu.Lock()
		delete(j.claims, a.Item)
		j.mu.Unlock()
		j.cache.noteDeleted(relItem(a.Item, nFailover))
		j.log.Info("failover claim dropped: the item ran and completed since it was claimed", "item", a.Item)
	}
}

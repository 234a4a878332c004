package protocol

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/counts"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/registration"
	"github.com/shardflow/shardflow/coord/store"
)

// joiner is one join of a job (startJob): its transaction, planned one
// attempt at a time (what an attempt planned is kept for the attempt that
// commits), then the config it runs on, the tree cache's load, the
// resharding flag and the election.
type joiner struct {
	j    *Job
	lc   localConfig
	sid  int64
	keys []string // lc.fields' names, sorted

	// The plan of the current attempt.
	res         joinResult
	candAt      int    // index of the candidate's create in the ops; -1: none
	ownCand     string // this session's candidate, from an earlier attempt
	newJob      bool
	hostPlanned bool // the ops create the host node beside the candidate
	ops         []store.Op
	readTotals  bool // a transaction that checked the totals taken from the mark failed: read them
}

// newJoiner returns the join of j on local config lc and session sid.
func newJoiner(j *Job, lc localConfig, sid int64) *joiner {
	return &joiner{j: j, lc: lc, sid: sid, keys: slices.Sorted(maps.Keys(lc.fields))}
}

// transact makes sure the job's skeleton exists and writes the local
// config when nothing is stored or Overwrite is set, in one transaction;
// for a job that does not exist yet, the same transaction registers this
// server (registerServer's nodes), raises the resharding flag and makes it
// the election's first candidate and leader (the host node). A stored
// config of another job type is a conflict (checked here only when this
// join would overwrite it; otherwise on the cache's read, before
// registering).
//
// Joiners racing on a new job all plan the same creation: one wins, and
// the others re-plan on what is stored (multiRetry), keeping the stored
// config unless Overwrite. The first attempt takes the skeleton below an
// existing top-level node (leader, guarantee) as present; a transaction
// that fails on a missing parent re-plans from reads of every skeleton
// node.
//
// Every config write bumps the config node's data version in the same
// transaction (servers watch that node only; docs/zookeeper-layout.md), and
// the cache is seeded with what was written.
func (jn *joiner) transact(ctx context.Context) (joinResult, error) {
	j := jn.j
	results, err := layout.MultiRetryResults(ctx, j.st, jn.plan)
	if err != nil {
		if errors.Is(err, ErrBadConfig) {
			return joinResult{}, err
		}
		return joinResult{}, fmt.Errorf("coord: join job %q: write skeleton and config: %w", j.jname, err)
	}
	jn.res.registeredAt = j.rg.RegisteredAt(jn.ops, results)
	j.totals.Seed(jn.res.counts)
	switch {
	case jn.candAt >= 0 && jn.candAt < len(results):
		j.elec.Adopt(results[jn.candAt].Path, jn.newJob || jn.hostPlanned)
	case jn.ownCand != "":
		j.elec.Adopt(jn.ownCand, false) // this session's, from an earlier attempt
	}
	return jn.res, nil
}

// plan is one attempt's plan (layout.MultiRetryResults).
func (jn *joiner) plan(ctx context.Context, attempt int) ([]store.Op, error) {
	j, lost := jn.j, jn.newJob // lost: a creation lost to another joiner's, whose skeleton is whole
	jn.readTotals = jn.readTotals || jn.res.counts.Checked
	jn.res, jn.candAt, jn.ownCand, jn.newJob, jn.hostPlanned, jn.ops = joinResult{}, -1, "", false, false, nil
	top, rd, rdOK, err := jn.readTop(ctx, attempt)
	if errors.Is(err, store.ErrNoNode) && attempt > 0 {
		// Maybe the namespace went (ErrNoParent).
		if err := store.CreateAll(ctx, j.st, store.Parent(j.p.Root)); err != nil {
			return nil, fmt.Errorf("coord: join job %q: create %s: %w", j.jname, store.Parent(j.p.Root), err)
		}
	}
	if errors.Is(err, store.ErrNoNode) {
		return jn.planNewJob(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("coord: join job %q: read %s: %w", j.jname, j.p.Root, err)
	}
	if err := jn.planSkeleton(ctx, top, attempt > 0 && !lost); err != nil {
		return nil, err
	}
	// A stored job: the config (through the tree cache, which arms its
	// watch) and what the registration needs, read side by side.
	if !rdOK {
		if rd, err = jn.readForJoin(ctx, slices.Contains(top, layout.NConfig), jn.readTotals); err != nil {
			return nil, err
		}
	}
	jn.res.preloaded, jn.res.ownSharding = true, slices.Contains(rd.serverKids, layout.NSharding)
	jn.res.counts = rd.counts
	if err := jn.planConfig(); err != nil {
		return nil, err
	}
	if err := jn.planRegistration(ctx, attempt, &rd); err != nil {
		return nil, err
	}
	jn.res.registered = true
	return jn.ops, nil
}

// readTop lists the job node (arming the tree cache's watch on it: the
// cache is loaded anew from here). For a job stored when the process
// started (its restart), the first attempt reads the stored nodes beside
// the listing, one round trip instead of two; rdOK says those reads are
// usable (the listing shows the config).
func (jn *joiner) readTop(ctx context.Context, attempt int) (top []string, rd joinReads, rdOK bool, err error) {
	j := jn.j
	j.cache.BeginLoad()
	if attempt != 0 || !j.reg.storedAtStart(j.jname) {
		top, _, err = j.cache.LoadShallow(ctx, "")
		return top, rd, false, err
	}
	g, gctx := errgroup.WithContext(ctx)
	var rdErr error
	g.Go(func() error {
		top, _, err = j.cache.LoadShallow(gctx, "")
		return nil
	})
	g.Go(func() error {
		rd, rdErr = jn.readForJoin(gctx, true, false)
		return nil
	})
	_ = g.Wait()
	return top, rd, err == nil && rdErr == nil && slices.Contains(top, layout.NConfig), err
}

// planNewJob plans a new job: everything in one transaction.
func (jn *joiner) planNewJob(ctx context.Context) ([]store.Op, error) {
	j, local, fields := jn.j, jn.lc.cfg, jn.lc.fields
	ops := []store.Op{&store.CreateOp{Path: j.p.Root}}
	for _, rel := range layout.SkeletonNodes {
		ops = append(ops, &store.CreateOp{Path: j.p.Abs(rel)})
	}
	for _, k := range jn.keys {
		ops = append(ops, &store.CreateOp{Path: j.p.Config(k), Data: []byte(fields[k])})
	}
	ops = append(ops, layout.WriteConfigNode(j.p, fields, store.AnyVersion))
	ops = append(ops, j.rg.Ops(registration.ServerNode{}, local.Disabled, false)...)
	ops = append(ops, j.rg.FreshRunRecordOp(), layout.TouchMembership(j.p))
	// The first and only candidate of a new job, and its leader
	// (recipe.Election.HostHeld).
	jn.candAt = len(ops)
	ops = append(ops, j.elec.CampaignOps(true)...)
	// The only server of a new job assigns its items itself
	// (lonejoin.go); else the flag is raised as raiseFlag does (the
	// flag version bumped).
	lops, lone, ok, err := jn.loneReshard(ctx, loneInput{cfg: local, ownDisabled: local.Disabled})
	if err != nil {
		return nil, err
	}
	if ok && jn.fitsWith(ops, lops) {
		ops = append(ops, lops...)
		jn.res.lone = &lone
	} else {
		ops = append(ops, layout.RaiseFlagOps(j.p)...)
	}
	ops, marked := j.rg.WithCounts(ops)
	jn.res.registered, jn.res.configWritten, jn.newJob = true, true, true
	jn.res.counts = counts.Joined{Totals: &counts.Known{}, Unwritten: marked} // this transaction creates the server's node
	jn.res.cfg, jn.res.cfgFields = local, fields
	return ops, nil
}

// planSkeleton creates the skeleton nodes missing under a stored job's
// node: those of a missing top-level node; after a failed attempt
// (maybe on a missing parent below an existing top-level node: deep)
// every one it does not find.
func (jn *joiner) planSkeleton(ctx context.Context, top []string, deep bool) error {
	j := jn.j
	missing := func(rel string) bool {
		for p := rel; p != "."; p = path.Dir(p) {
			if !strings.Contains(p, "/") && !slices.Contains(top, p) {
				return true // its top-level node is missing
			}
		}
		return false
	}
	for _, rel := range layout.SkeletonNodes {
		switch {
		case missing(rel):
			jn.ops = append(jn.ops, &store.CreateOp{Path: j.p.Abs(rel)})
		case deep && strings.Contains(rel, "/"):
			ok, _, err := j.st.Exists(ctx, j.p.Abs(rel))
			if err != nil {
				return fmt.Errorf("coord: join job %q: read %s: %w", j.jname, j.p.Abs(rel), err)
			}
			if !ok {
				jn.ops = append(jn.ops, &store.CreateOp{Path: j.p.Abs(rel)})
			}
		}
	}
	return nil
}

// planConfig keeps a stored config (it must decode before this server
// registers on it) unless there is none or Overwrite is set; then it
// writes the local one, every field and the config node's copy.
func (jn *joiner) planConfig() error {
	j, local, fields := jn.j, jn.lc.cfg, jn.lc.fields
	stored := j.nodes.CachedConfigFields()
	if t, ok := stored[layout.JobTypeField]; ok && strings.TrimSpace(t) != string(local.Type()) {
		return fmt.Errorf("%w: %s is %q, but this is a %s job; pick another job name or remove the old job", ErrBadConfig, j.p.Config(layout.JobTypeField), strings.TrimSpace(t), local.Type())
	}
	if len(stored) > 0 && !local.Overwrite {
		runCfg, err := j.nodes.DecodeConfig(stored)
		if err != nil {
			return err
		}
		jn.res.storedWins = true
		jn.res.cfg, jn.res.cfgFields = runCfg, stored
		return nil
	}
	jn.res.cfg, jn.res.cfgFields = local, fields
	for _, k := range jn.keys {
		jn.ops = append(jn.ops, layout.PutOp(j.p.Config(k), []byte(fields[k]), hasKey(stored, k)))
	}
	copied := fields
	for n := range stored {
		if _, ok := fields[n]; !ok {
			copied = nil // stored fields beyond ours: no copy, servers read the fields
			break
		}
	}
	// Any version: this transaction writes every field its copy
	// holds, so the copy matches the fields whatever committed
	// before it (K servers joining with overwrite at once would
	// otherwise fail each other's version checks); a concurrent
	// SetConfig checks the version and plans again.
	jn.ops = append(jn.ops, layout.WriteConfigNode(j.p, copied, store.AnyVersion))
	jn.res.configWritten = true
	return nil
}

// hasKey reports whether m has key k.
func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// planRegistration plans a stored job's registration (registerServer's
// nodes), the election candidate and, on the first attempt, the
// resharding flag, in the same transaction: a reshard either committed
// before it (and the flag is raised again here) or reads this server (its
// Multi checks the membership version this transaction bumps). A later
// attempt (joiners racing, whose reshards keep clearing the flag) raises
// the flag after the transaction, by a direct create: it must be up after
// the registration.
func (jn *joiner) planRegistration(ctx context.Context, attempt int, rd *joinReads) error {
	j := jn.j
	// The record read beside the rest, unless a previous session's
	// status is waited for below (its run may rewrite the record
	// meanwhile): then read again after the wait.
	pre := &rd.run
	if rd.statusOwner != 0 && rd.statusOwner != jn.sid && attempt == 0 {
		pre = nil
		ok, stat, err := j.rg.AwaitStatusGone(ctx, j.p.Server(j.id, layout.NStatus), jn.sid)
		if err != nil {
			return err
		}
		rd.statusOwner = 0
		if ok {
			rd.statusOwner = stat.EphemeralOwner
		}
	}
	if rd.statusOwner != 0 && rd.statusOwner != jn.sid {
		return fmt.Errorf("%w: %s belongs to live session 0x%x; set a distinct %s", ErrServerIDInUse, j.p.Server(j.id, layout.NStatus), rd.statusOwner, j.reg.serverIDSetting())
	}
	node := registration.ServerNode{Exists: rd.serverKids != nil, Kids: rd.serverKids, StatusHeld: rd.statusOwner != 0}
	jn.ops = append(jn.ops, j.rg.Ops(node, jn.lc.cfg.Disabled, true)...)
	lops, err := j.rg.LayoutOps(ctx, rd.serverKids, pre)
	if err != nil {
		return err
	}
	jn.ops = append(append(jn.ops, lops...), rd.counts.Ops...)
	memberAt := len(jn.ops)
	jn.ops = append(jn.ops, layout.TouchMembership(j.p))
	jn.planCandidate(attempt, rd)
	if jn.hostPlanned && pre != nil && rd.statusOwner == 0 && rd.serversListed {
		lops, lone, ok, err := jn.planLoneJoin(ctx, jn.lc.cfg, jn.res.cfg, jn.res.storedWins, *rd)
		if err != nil {
			return err
		}
		if ok && jn.fitsWith(jn.ops, lops) {
			jn.ops[memberAt] = membershipAt(j.p, rd.membersVersion)
			jn.ops = append(jn.ops, lops...)
			jn.res.lone = &lone
		}
	}
	switch {
	case jn.res.lone != nil:
		// The flag went in its reshard (lonejoin.go).
	case attempt > 0:
		jn.res.flagPending = true
	case rd.flagUp:
		// Still up at the commit, else plan again: a reshard that
		// cleared it in between may have missed this server.
		jn.ops = append(jn.ops, &store.CheckOp{Path: j.p.Abs(layout.RelNecessary), Version: store.AnyVersion})
	default:
		jn.ops = append(jn.ops, layout.RaiseFlagOps(j.p)...)
	}
	if rd.serverKids == nil { // the transaction creates this server's node
		jn.ops, jn.res.counts.Unwritten = j.rg.WithCounts(jn.ops)
	}
	return nil
}

// planCandidate makes this server an election candidate unless this
// session has one already. When no candidate stood at all (a restarted
// process's jobs, one server each), the first attempt takes the
// leadership in the same transaction, as a new job's join does, instead
// of an election's listing and create after it. The host node of a leader
// still standing makes it fail and plan again without this. A candidate
// created between the listing and this commit stands first behind a host
// node this server holds: it waits on that node, as behind any leader
// (recipe.Election.Proceed).
func (jn *joiner) planCandidate(attempt int, rd *joinReads) {
	j := jn.j
	if rd.ownCandidate != "" {
		jn.ownCand = rd.ownCandidate
		return
	}
	jn.candAt = len(jn.ops)
	jn.hostPlanned = rd.noCandidate && attempt == 0
	jn.ops = append(jn.ops, j.elec.CampaignOps(jn.hostPlanned)...)
}

// adoptConfig takes the config the job runs on after the transaction: the
// config is read once, by the tree cache's watched load (one read when the
// config node holds a copy of the fields): for a stored config, by the
// transaction's plan, before this server registers on it (a config that
// does not decode refuses the join without a trace in the store); a
// config the transaction wrote, now.
func (jn *joiner) adoptConfig(ctx context.Context, jt joinResult) error {
	j, local := jn.j, jn.lc.cfg
	if jt.configWritten {
		if err := j.cache.LoadRoots(ctx, []string{layout.NConfig}); err != nil {
			return fmt.Errorf("coord: join job %q: load tree: %w", j.jname, err)
		}
	}
	fields := j.nodes.CachedConfigFields()
	if t, ok := fields[layout.JobTypeField]; ok && strings.TrimSpace(t) != string(local.Type()) {
		return fmt.Errorf("%w: %s is %q, but this is a %s job; pick another job name or remove the old job", ErrBadConfig, j.p.Config(layout.JobTypeField), strings.TrimSpace(t), local.Type())
	}
	// The config the transaction wrote, or the stored one its plan
	// decoded, unless another writer changed it since.
	cfg := jt.cfg
	if !maps.Equal(fields, jt.cfgFields) {
		var err error
		if cfg, err = j.nodes.DecodeConfig(fields); err != nil {
			return err
		}
	}
	if jt.storedWins {
		jn.warnStoredWins(jn.lc.fields, cfg)
	}
	j.cfg, j.itemParams, j.cfgFields = cfg, itemParameters(cfg), fields
	j.ld.SetLastTotalLocked(cfg.ShardingTotalCount)
	j.rg.LocalDisabled = local.Disabled
	return nil
}

// loadTree loads the tree cache's roots the transaction's plan did not
// load already. A skeleton left partial below an existing top-level node
// (the transaction took it as whole) is created node by node and loaded
// again.
func (jn *joiner) loadTree(ctx context.Context, jt joinResult) error {
	j := jn.j
	rest := slices.DeleteFunc(slices.Clone(jobnodes.Roots), func(rel string) bool {
		return rel == layout.NConfig || jt.preloaded && (rel == "" || rel == layout.RelFailoverQ || rel == layout.NServers)
	})
	if jt.preloaded {
		rest = append(rest, jn.joinServerRoots()...)
	}
	if err := j.cache.LoadRootsAhead(ctx, rest, jn.joinAhead(jt)); err != nil {
		return fmt.Errorf("coord: join job %q: load tree: %w", j.jname, err)
	}
	if missing := j.cache.MissingRoots(); len(missing) > 0 {
		j.log.Info("job skeleton incomplete; creating the missing nodes", "missing", missing)
		for _, rel := range layout.SkeletonNodes {
			if err := store.CreateAll(ctx, j.st, j.p.Abs(rel)); err != nil {
				return fmt.Errorf("coord: join job %q: create %s: %w", j.jname, j.p.Abs(rel), err)
			}
		}
		j.cache.BeginLoad()
		if err := j.cache.LoadRootsAhead(ctx, jobnodes.Roots, nil); err != nil {
			return fmt.Errorf("coord: join job %q: load tree: %w", j.jname, err)
		}
	}
	if err := j.cache.EndLoad(ctx); err != nil {
		return fmt.Errorf("coord: join job %q: load tree: %w", j.jname, err)
	}
	return nil
}

// finish raises the resharding flag when the transaction did not, or
// takes a lone join's reshard as done (lonejoin.go).
func (jn *joiner) finish(ctx context.Context, jt joinResult) error {
	j := jn.j
	if jt.flagPending && !j.rg.ReshardedSince(ctx, jt.registeredAt) { // else the transaction raised it
		if err := j.setNecessary(ctx); err != nil {
			return fmt.Errorf("coord: join job %q: set resharding flag: %w", j.jname, err)
		}
	}
	if jt.lone != nil {
		j.ld.Resharded(jt.lone.live, jt.lone.total, "join")
		j.ld.PruneItemsBeyond(ctx, jt.lone.total)
		j.ld.SignalResharded(jt.lone.live, jt.lone.total)
	}
	return nil
}

// elect stands in the leader election. Unless the transaction resharded,
// it (or setNecessary) raised the flag: the leader duties of this
// election need not raise it again. After a lone join's reshard they find
// nothing changed (shardedLive).
func (jn *joiner) elect(ctx context.Context, jt joinResult) (uint64, error) {
	j := jn.j
	j.ld.FlagRaised, j.joinResharded = jt.lone == nil, jt.lone != nil
	pred, err := j.elect(ctx)
	j.ld.FlagRaised, j.joinResharded = false, false // a later election raises it itself
	if err != nil {
		return 0, fmt.Errorf("coord: join job %q: leader election: %w", j.jname, err)
	}
	return pred, nil
}

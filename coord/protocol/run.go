package protocol

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/failover"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/protocol/internal/runs"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
)

// Run is one run of a job on this server.
type Run struct {
	j       *Job
	session int64
	items   []Assignment
	// cfg and params are the config snapshot the run began on: its items
	// were computed with cfg's total, and the pipeline gets the same.
	cfg    jobconfig.Config
	params map[int]string
	// shardMzxid is the Mzxid of this server's sharding node that the
	// run's normal items took their epochs from (0: failover items only).
	// A reshard since changes it: the run is then fenced for good.
	shardMzxid int64
	// begin is the begin time Begin wrote (lastBeginTime and the run
	// record), as stored.
	begin  string
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
	done   bool
	// released: complete has dropped the run's items from job.inRun.
	released bool
	// live: Begin created the live marker servers/{id}/run/live (a
	// monitored normal run); Complete deletes it.
	live bool
	// quiet: an unmonitored run whose Begin wrote nothing (quiet.go).
	quiet bool
	// failing: the run's failing items, as its Complete writes them in its
	// record (set once by complete from the RunOutcome).
	failing map[int]layout.ItemFailure
	// counts: the interval counts its Complete reports (nil: none); only
	// complete's own writes carry them, never an owed completion.
	counts *CountReport
	// shardVersion and written: its Begin's fence and writes (Fence).
	shardVersion int32
	written      txn.Written
}

// ready checks the preconditions every Begin shares: a live registration on
// a connected session, not shut down, removed, paused, and a valid config.
func (j *Job) ready() (int64, context.Context, error) {
	sess, _ := j.st.Session()
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.left:
		return 0, nil, fmt.Errorf("coord: job %q: Leave was called: %w", j.jname, ErrShutdown)
	case j.removed:
		return 0, nil, fmt.Errorf("coord: job %q was removed from the namespace: %w", j.jname, ErrShutdown)
	case j.offline:
		return 0, nil, fmt.Errorf("coord: job %q, server %q: %w", j.jname, j.id, ErrShutdown)
	case sess.State != store.StateConnected || sess.ID != j.regSession || j.regCtx.Err() != nil:
		return 0, nil, fmt.Errorf("coord: job %q: %s: %w", j.jname, layout.SessionProblem(sess, j.regSession), ErrSessionLost)
	case j.cfgErr != nil:
		return 0, nil, j.cfgErr
	}
	return j.regSession, j.regCtx, nil
}

// Begin starts a run at local time now: checks the clock, reshards first if
// this server leads and the flag is set (otherwise waits for the leader),
// computes this server's items (failover items first; disabled items and
// items failed over to others dropped), and marks them running in one
// transaction. A run with no items is valid (Shards is empty). A transaction
// refused by concurrent writers (reshards, failover) is planned again while
// they go on, within ctx.
//
// Errors: ErrItemsRunning (misfire recorded), ErrPaused, ErrShutdown,
// ErrClockSkew, ErrSessionLost, ErrBadConfig, ctx.Err().
func (j *Job) Begin(ctx context.Context, now time.Time) (r *Run, err error) {
	defer func() {
		if err != nil && !errors.Is(err, ErrSessionLost) && (recipe.LostConnection(j.st, err) || j.registrationGone()) {
			// A store call failed because the connection or session went:
			// to the caller that is a lost session, as documented.
			err = fmt.Errorf("%w: %w", ErrSessionLost, err)
		}
	}()
	sid, regCtx, err := j.ready()
	if err != nil {
		return nil, err
	}
	if jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NShutdown)) {
		return nil, fmt.Errorf("coord: job %q, server %q: %w", j.jname, j.id, ErrShutdown)
	}
	if jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NPaused)) {
		return nil, j.refusePaused(ctx, sid)
	}
	// One config snapshot for the whole trigger: an edit that arrives
	// while this Begin runs applies to the next trigger, whole.
	cfg, params := j.snapshot()
	if cfg.MaxTimeDiff > 0 {
		if err := j.checkClock(ctx, now, cfg.MaxTimeDiff); err != nil {
			return nil, err
		}
	}
	b := &beginning{j: j, cfg: cfg, sid: sid, regCtx: regCtx}
	var plan, refused beginPlan
	refusedOnce := false // refused: the plan refused last, with no leftover of ours removed since
	for attempt := 0; ; attempt++ {
		if plan, err = b.plan(ctx, attempt); err != nil {
			return nil, err
		}
		items := plan.items
		err := b.markRunning(ctx, now, plan)
		if err != nil {
			j.fo.TakeClaims(failoverItems(items), false)
		}
		// Resharded, failover writers, or leftovers removed since our reads
		// (or the cache's): plan again (after the reshard in flight) for as
		// long as the store moves. Each refusal is another writer's commit,
		// which the next plan reads: lock-free, bounded by ctx (a fixed bound
		// failed triggers under churn: simulation seeds 54100134, 54100938,
		// 54200811). The same plan refused twice is a bug, returned. After
		// ErrBeginAgain (a leftover of ours removed) the same plan may pass.
		raced := errors.Is(err, store.ErrBadVersion) || errors.Is(err, store.ErrNoNode) && len(items) > 0 && !items[0].Failover
		if raced && refusedOnce && plan.same(refused) {
			j.log.Warn("Begin's plan refused twice on the same versions", "items", items, "err", err)
		} else if raced || errors.Is(err, runs.ErrBeginAgain) {
			refused, refusedOnce = plan, raced
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	j.recordLastError(ctx, "")
	items := plan.items
	r = &Run{j: j, session: b.sid, items: items, cfg: cfg, params: params, shardMzxid: plan.shardMzxid, begin: b.begin,
		live: len(items) > 0 && !items[0].Failover && cfg.MonitorsExecution(), quiet: b.quiet}
	r.shardVersion, r.written = plan.shardVersion, b.written
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.stop = context.AfterFunc(b.regCtx, r.cancel)
	return r, nil
}

// refusePaused is a paused server's Begin: it runs nothing, and returns
// ErrPaused. A paused leader still reshards: else a flag its watcher
// missed (raised while it re-registered or resumed) holds every other
// server's Begin, trigger after trigger (simulation seeds 200040, 300290
// on ZooKeeper). It never waits for running items here.
func (j *Job) refusePaused(ctx context.Context, sid int64) error {
	if j.isLeader() {
		if _, err := j.ld.ReshardWhenIdle(ctx, recipe.NoWatch(j.st)); err != nil {
			j.log.Debug("paused leader: prompt resharding failed; the next trigger retries", "err", err)
		}
	}
	// Failover items claimed before the pause go back to the queue
	// for another server: held here they would run nowhere (their
	// owner skips an item failed over to another) until a resume.
	// A claim whose reply was lost is one of them.
	if _, err := j.fo.SettleUnsureClaims(ctx, sid); err != nil {
		j.log.Debug("paused: cannot read a claim whose reply was lost; the next Begin does", "err", err)
	}
	j.fo.ReleaseClaims(ctx)
	return fmt.Errorf("coord: job %q, server %q: %w", j.jname, j.id, ErrPaused)
}

// beginning is one Begin on its config snapshot, planned again (plan) on
// each attempt whose transaction (markRunning) lost to a concurrent writer.
type beginning struct {
	j   *Job
	cfg jobconfig.Config
	// sid and regCtx are the registration the run belongs to: the one
	// current when its items were read.
	sid    int64
	regCtx context.Context
	// cached: the first plan read from the tree cache (plan).
	cached bool
	// requeued: a plan queued lost claims of its items again (readOwn).
	requeued bool
	// quiet: markRunning wrote nothing (quiet.go).
	quiet bool
	// begin: the begin time markRunning wrote (or would have), as stored.
	begin string
	// written: what markRunning's transaction wrote (the run's Fence).
	written txn.Written
}

// beginPlan is what an attempt of a Begin read: its items and the
// versions its transaction (markRunning) is fenced by.
type beginPlan struct {
	items        []Assignment
	shardVersion int32
	// flagVersion: leader/sharding's data version when Begin found no
	// resharding flag (-1: not read, a failover run).
	flagVersion int32
	shardMzxid  int64
	fo          jobnodes.FailoverDir
	// cached: read from the tree cache (see fences).
	cached bool
}

// same reports whether p is the plan q was: the same items and epochs,
// fenced by the same versions (the sharding node's Mzxid too: a node
// recreated may have its old version again), consuming the same tokens.
// A plan from the cache is the same as one read directly.
func (p beginPlan) same(q beginPlan) bool {
	return slices.Equal(p.items, q.items) && p.shardVersion == q.shardVersion && p.flagVersion == q.flagVersion && p.shardMzxid == q.shardMzxid &&
		p.fo.Version == q.fo.Version && maps.Equal(p.fo.Queued, q.fo.Queued) && maps.Equal(p.fo.Claims, q.fo.Claims)
}

// plan reads an attempt's items: this server's failover items if it has
// any (they run first and need no resharding); otherwise, once resharding
// is done (this server reshards if it leads, else waits for the leader),
// its own items.
//
// The first attempt reads the flag directory, the sharding node and the
// failover directory from the tree cache where it has them (a Begin is
// then its Multi alone), the later ones directly. Each cached node is the
// Stat and data or listing of one earlier read, and the transaction checks
// each one's version: a cache behind the store fails it, and Begin plans
// again on direct reads (docs/zookeeper-layout.md, "Begin from the tree
// cache").
func (b *beginning) plan(ctx context.Context, attempt int) (beginPlan, error) {
	j := b.j
	p := beginPlan{flagVersion: -1}
	// A claim of this server whose reply was lost is run as claimed.
	if _, err := j.fo.SettleUnsureClaims(ctx, b.sid); err != nil {
		return p, err
	}
	var err error
	if p.items, p.shardVersion, err = j.failoverAssignments(ctx, b.cfg); err != nil || len(p.items) > 0 {
		return p, err
	}
	cached := attempt == 0 && !j.cache.Incomplete()
	if cached {
		p.flagVersion, cached = jobnodes.CachedFlagVersion(j.cache)
	}
	if !cached {
		if p.flagVersion, err = j.awaitSharding(ctx, b.cfg); err != nil {
			return p, err
		}
	}
	// The registration the run belongs to is the one current now.
	if b.sid, b.regCtx, err = j.ready(); err != nil {
		return p, err
	}
	if err = j.rg.LayoutGuard(ctx); err != nil {
		return p, err
	}
	if attempt == 0 {
		b.cached, p.cached = cached, cached
	}
	return p, b.readOwn(ctx, attempt, &p)
}

// readOwn reads this server's own items into p: its sharding node (the
// assignment and the version that fences the transaction; from the tree
// cache on the first attempt when the cache has it, see plan) and the
// failover directory (likewise: its queue entries, the
// tokens of crashed runs, which this run consumes for its items, and its
// version, which the transaction checks: a claim, a failover run's
// completion, a queueing since fails it). The claims and failover marks of
// its items come from its last direct read of them while the directory's
// version is the one that read was made at, else (a failover writer came
// since: rare) from a direct read, pipelined.
func (b *beginning) readOwn(ctx context.Context, attempt int, p *beginPlan) error {
	j := b.j
	cached := b.cached && attempt == 0
	data, st, found, err := j.nodes.Sharding(ctx, j.id, cached)
	if err != nil {
		return err
	}
	if p.fo, err = j.nodes.FailoverDir(ctx, cached); err != nil {
		return err
	}
	var view map[int]failover.ItemView
	if attempt == 0 {
		view = j.fo.ViewAt(p.fo.Version, st.Mzxid)
	}
	if p.items, p.shardVersion, view, err = j.assignments(ctx, b.cfg.ShardingTotalCount, data, st, found, view, p.fo.Claims); err != nil {
		return err
	}
	j.fo.NoteView(p.fo.Version, st.Mzxid, view)
	p.shardMzxid = st.Mzxid
	if lost := b.lostClaims(*p); len(lost) > 0 && !b.requeued {
		// A cut failover run's claim record among its items (its claim
		// gone): queued again first, the item's failover mark raised, as
		// the leader's scan does; read again (directly), the run consumes
		// the queue entry with an epoch above the lost claim's. Consumed
		// with the record, the run would carry its sharding node's Mzxid,
		// below the claim's Czxid when the claim came after the reshard,
		// and a highest-epoch fence the cut failover run had written would
		// refuse its commits until the next reshard (workflow simulation
		// seed 51001084, with a sink fencing in its own transaction).
		b.requeued = true
		j.fo.RequeueLostClaims(ctx, lost)
		return b.readOwn(ctx, attempt+1, p)
	}
	return nil
}

// lostClaims are p's normal items with a claim record whose claim is gone
// (assignments skips an item whose claim lives).
func (b *beginning) lostClaims(p beginPlan) []int {
	var lost []int
	for _, a := range p.items {
		if !a.Failover && p.fo.Claims[a.Item] && !b.j.fo.Claimed(a.Item) {
			lost = append(lost, a.Item)
		}
	}
	return lost
}

// markRunning begins a run in ONE Multi (in parts only beyond the request
// limit, internal/txn/split.go).
//
// A normal run (layout 2) writes no per-item node: the Multi checks the
// version of this server's sharding node (a reshard since fails it), the
// flag version (flagVersion >= 0; see raiseFlag: a resharding flag raised
// since awaitSharding found none fails it, and Begin waits for the reshard
// instead of starting a run the leader's wait has missed) and the failover
// directory's version fo.version (a claim, a queueing or a failover run's
// completion since fails it, and Begin plans again on a fresh read); it
// deletes the queue entries of its items (the run re-runs them: it
// consumes the crashed run's token, and a claim of the same item, which
// deletes the same entry, cannot commit too), and writes the run record
// (epoch: the Mzxid of the sharding node it was planned on), the live
// marker (monitored runs) and status RUNNING.
//
// A failover run writes per item, as before: its claim checked, running
// (ephemeral), lastBeginTime.
//
// A monitored normal run overlapping a monitored run of this server (its
// live marker exists, held by a run of this process on this session) flags
// misfire on its items and returns ErrItemsRunning.
func (b *beginning) markRunning(ctx context.Context, now time.Time, p beginPlan) error {
	j := b.j
	j.mu.Lock()
	sid := j.regSession
	j.mu.Unlock()
	b.begin = layout.FormatTimeText(now)
	groups := b.itemIntents(p, b.begin)
	if b.quiet = b.quietBegin(p, len(groups)); b.quiet {
		// The plan of the last Begin that wrote, and nothing to consume:
		// an unmonitored run writes nothing (quiet.go). Its items are
		// held in this process as any run's.
		j.rn.HoldItems(itemNumbers(p.items), 1)
		return nil
	}
	begin := []byte(b.begin)
	head := b.fences(p)
	tail, live, failing := b.recordIntents(p.items, begin, p.shardMzxid)
	// Held from before the transaction, not after it: a Begin beside this
	// one that finds the marker or the items held must see them held, or
	// it would take them for leftovers.
	j.rn.HoldItems(itemNumbers(p.items), 1)
	if live {
		j.rn.HoldMarker(sid, 1)
	}
	applied, written, err := j.tx.CommitSplitWritten(ctx, head, groups, tail)
	if err != nil && applied > 0 {
		j.rn.UndoBegin(ctx, itemNumbers(p.items), groups[:applied])
	}
	b.written = written
	if err != nil {
		return b.markFailed(ctx, p.items, sid, b.begin, p.shardMzxid, live, err)
	}
	b.noteBegun(p, failing)
	return nil
}

// fences are the version checks of a Begin's transaction: this server's
// sharding node, the flag version (a normal run's) and the failover
// directory (a normal run's).
func (b *beginning) fences(p beginPlan) []txn.Intent {
	j := b.j
	failover := len(p.items) > 0 && p.items[0].Failover
	var head []txn.Intent
	if p.shardVersion >= 0 {
		head = append(head, txn.Intent{Kind: txn.Check, Rel: layout.RelServer(j.id, layout.NSharding), Version: p.shardVersion})
	}
	// A plan of no items too when the cache said there was no flag: it
	// may lag one the leader has yet to reshard on, and the run would be
	// empty where the reshard gives it items (ZooKeeper, ConcurrentJoin).
	if p.flagVersion >= 0 && (len(p.items) > 0 || p.cached) {
		head = append(head, txn.Intent{Kind: txn.Check, Rel: layout.RelShardingDir, Version: p.flagVersion})
	}
	if !failover && len(p.items) > 0 && p.fo.Version >= 0 {
		head = append(head, txn.Intent{Kind: txn.Check, Rel: layout.RelFailoverQ, Version: p.fo.Version})
	}
	return head
}

// itemIntents are a Begin's writes per item: a failover item's claim
// checked, running (ephemeral) and lastBeginTime; a normal item's
// consumed failover tokens (its queue entry, a cut failover run's claim
// record).
func (b *beginning) itemIntents(p beginPlan, begin string) [][]txn.Intent {
	j := b.j
	var groups [][]txn.Intent
	for _, a := range p.items {
		if a.Failover {
			// The claim must still be there: an edit switching failover
			// or monitorExecution off clears the claims no run has taken
			// (Admin.SetConfig), and this Begin's snapshot may predate it.
			groups = append(groups, []txn.Intent{
				{Kind: txn.CreateIfAbsent, Rel: layout.RelItem(a.Item)},
				{Kind: txn.Check, Rel: layout.RelItem(a.Item, layout.NFailover), Version: store.AnyVersion},
				{Kind: txn.Create, Rel: layout.RelItem(a.Item, layout.NRunning), Data: []byte(j.id), Mode: store.Ephemeral},
				{Kind: txn.Put, Rel: layout.RelItem(a.Item, layout.NLastBeginTime), Data: []byte(begin)}})
			continue
		}
		var g []txn.Intent
		if p.fo.Queued[a.Item] {
			// This run re-runs a crashed run's item: it consumes the entry.
			g = append(g, txn.Intent{Kind: txn.Delete, Rel: layout.RelFailoverQ + "/" + strconv.Itoa(a.Item)})
		}
		if p.fo.Claims[a.Item] && !j.fo.Claimed(a.Item) {
			// A claim record whose claim is gone (assignments skips an
			// item whose claim lives): the token of a cut failover run,
			// consumed the same way. A claim since fails the version
			// check above.
			g = append(g, txn.Intent{Kind: txn.Delete, Rel: layout.RelClaim(a.Item)})
		}
		if len(g) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}

// recordIntents are a Begin's writes for the server: for a normal run, its
// run record (epoch: the Mzxid of the sharding node it was planned on,
// failing: the failing items it carries) and, when it monitors execution,
// status RUNNING and the live marker (live); for a failover run, status
// RUNNING. An unmonitored run leaves status alone: nothing is running for
// the protocol (its Complete writes READY, for a status a monitored run
// left).
func (b *beginning) recordIntents(items []Assignment, begin []byte, epoch int64) (tail []txn.Intent, live bool, failing map[int]layout.ItemFailure) {
	j := b.j
	if len(items) == 0 {
		return nil, false, nil
	}
	monitor := b.cfg.MonitorsExecution()
	if monitor || items[0].Failover {
		tail = append(tail, txn.Intent{Kind: txn.Set, Rel: layout.RelServer(j.id, layout.NStatus), Data: []byte(layout.StatusRunning)})
	}
	if rec, ok := runRecordOf(items, string(begin), "", monitor, epoch); ok {
		j.failing.Keep(rec.Items)
		rec.Failing = j.failing.Of(rec.Items)
		failing = rec.Failing
		tail = append(tail, txn.Intent{Kind: txn.Put, Rel: layout.RelServer(j.id, layout.NRun), Data: layout.EncodeRunRecord(rec)})
		if monitor {
			live = true
			tail = append(tail, txn.Intent{Kind: txn.Create, Rel: layout.RelServer(j.id, layout.NRun, layout.NLive), Data: []byte(j.id), Mode: store.Ephemeral})
		}
	}
	return tail, live, failing
}

// markFailed handles a Begin's failed transaction. The items (and the
// marker) are released at once: if the transaction was applied but its
// reply lost, its marker (or running nodes) are leftovers the next Begin
// removes.
func (b *beginning) markFailed(ctx context.Context, items []Assignment, sid int64, begin string, epoch int64, live bool, err error) error {
	j, cfg := b.j, b.cfg
	failover := len(items) > 0 && items[0].Failover
	j.rn.HoldItems(itemNumbers(items), -1)
	if live {
		j.rn.HoldMarker(sid, -1)
		if txn.Ambiguous(j.st, err) {
			// Applied, perhaps: the marker would stay on a session
			// that resumes, with no run holding it, and hold every
			// reshard until this server's next Begin.
			j.rn.OweMarkerLeftover(sid, begin, epoch)
		}
	}
	switch {
	case errors.Is(err, store.ErrNodeExists) && live:
		return j.rn.MarkerInTheWay(ctx, cfg, itemNumbers(items))
	case errors.Is(err, store.ErrNodeExists) && failover:
		// A running node of a failover item: a leftover of this
		// server's run of it, or another failover run's.
		all := make([]int, len(items))
		for i, a := range items {
			all[i] = a.Item
		}
		if merr := j.rn.MisfireIfRunning(ctx, cfg, all); merr != nil {
			return merr
		}
		return fmt.Errorf("coord: job %q: mark items running: %w", j.jname, runs.ErrBeginAgain)
	case errors.Is(err, store.ErrBadVersion):
		return fmt.Errorf("coord: job %q: resharded or failover state changed while starting: %w", j.jname, err)
	case errors.Is(err, store.ErrNoNode) && failover:
		if lost, lerr := j.dropLostClaims(ctx, items); lerr != nil {
			return lerr
		} else if lost {
			return fmt.Errorf("coord: job %q: mark items running: %w", j.jname, runs.ErrBeginAgain)
		}
	}
	return fmt.Errorf("coord: job %q: mark items running: %w", j.jname, err)
}

// checkClock writes systemTime/current and compares its Mtime with now.
func (j *Job) checkClock(ctx context.Context, now time.Time, maxDiff time.Duration) error {
	p := j.p.Abs(layout.RelClock)
	st, err := j.st.Set(ctx, p, layout.FormatTime(now), store.AnyVersion)
	if errors.Is(err, store.ErrNoNode) {
		// First check of the job: create it, then Set for a fresh Mtime.
		if err = layout.Put(ctx, j.st, p, layout.FormatTime(now)); err == nil {
			st, err = j.st.Set(ctx, p, layout.FormatTime(now), store.AnyVersion)
		}
	}
	if err != nil {
		return fmt.Errorf("coord: job %q: clock check via %s: %w", j.jname, p, err)
	}
	diff := now.Sub(st.Mtime)
	if diff < 0 {
		diff = -diff
	}
	if diff > maxDiff {
		e := &ClockSkewError{Local: now, Coordinator: st.Mtime, MaxDiff: maxDiff}
		j.recordLastError(ctx, e.Error())
		return e
	}
	return nil
}

// awaitSharding reshards first if the flag is set and this server leads;
// otherwise it waits until the leader has (flag and processing gone). It
// returns the flag version (leader/sharding's data version, read with the
// absent flag; -1 when the node is gone) for Begin's transaction to check.
func (j *Job) awaitSharding(ctx context.Context, cfg jobconfig.Config) (flagVersion int32, err error) {
	for {
		ch := j.cache.Changed()
		// The flag is read directly (one read per trigger): a cache that
		// has not seen it yet must not let this server run stale items.
		// Its parent's children and Stat in one read: the flag version
		// comes with the flag's absence.
		names, st, err := j.st.Children(ctx, j.p.Abs(layout.RelShardingDir))
		if errors.Is(err, store.ErrNoNode) {
			names, st.Version, err = nil, -1, nil
		}
		if err != nil {
			return -1, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Abs(layout.RelShardingDir), err)
		}
		nec := slices.Contains(names, layout.NNecessary)
		if !nec && !j.cache.Has(layout.RelProcessing) {
			if j.cache.Has(layout.RelNecessary) {
				// Let the cache catch up so KeepGoing does not stop the
				// new run on a flag that is already gone.
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = j.cache.WaitFor(wctx, func() bool { return !j.cache.Has(layout.RelNecessary) })
				cancel()
			}
			return st.Version, nil
		}
		if _, _, err := j.ready(); err != nil {
			return -1, err
		}
		if nec && j.isLeader() && !j.cache.Has(layout.RelProcessing) {
			if err := j.ld.Reshard(ctx, cfg); err != nil {
				return -1, err
			}
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return -1, fmt.Errorf("coord: job %q: waiting for the leader to reshard: %w", j.jname, ctx.Err())
		}
	}
}

// failoverAssignments returns the failover items this server claimed and
// no run of it has taken, with the failover nodes' Czxid as epochs; it
// takes them (releaseClaims gives them back if the Begin fails). On a
// config without failover (failoverOn) it drops every claim no run has
// taken and returns none.
func (j *Job) failoverAssignments(ctx context.Context, cfg jobconfig.Config) ([]Assignment, int32, error) {
	var out []Assignment
	claims, dropped := j.fo.Untaken(cfg)
	for it, czxid := range dropped {
		j.fo.DropClaimNode(ctx, it, czxid)
	}
	if len(claims) > 0 {
		for it, epoch := range claims {
			// Read directly unless the cache has loaded the item: the
			// watcher starts watching a claimed item only after the claim.
			// A failed read fails the Begin: skipped here, the claimed item
			// would go to the normal run (ZooKeeper simulation seed
			// 1005053: an epoch below that run's when its failover run
			// came after).
			disabled, err := j.nodes.ItemHas(ctx, layout.RelItem(it, layout.NDisabled))
			if err != nil {
				return nil, -1, err
			}
			if disabled {
				continue
			}
			out = append(out, Assignment{Item: it, Epoch: epoch, Failover: true})
		}
		slices.SortFunc(out, func(a, b Assignment) int { return a.Item - b.Item })
	}
	j.fo.TakeClaims(failoverItems(out), true)
	return out, -1, nil
}

// dropLostClaims forgets the claims among items whose failover node is gone
// (an edit switching failover or monitorExecution off cleared it): it
// reports whether there was one, for Begin to plan again without it.
func (j *Job) dropLostClaims(ctx context.Context, items []Assignment) (bool, error) {
	lost := false
	for _, a := range items {
		if !a.Failover {
			continue
		}
		ok, st, err := j.st.Exists(ctx, j.p.Item(a.Item, layout.NFailover))
		if err != nil {
			return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Item(a.Item, layout.NFailover), err)
		}
		if ok && st.Czxid == a.Epoch {
			continue
		}
		lost = true
		j.fo.Forget(a.Item)
		j.log.Info("failover claim gone before its run began (cleared by a config edit)", "item", a.Item)
	}
	return lost, nil
}

// assignments computes this server's sharding items minus items with a
// failover claim (another server's, or this server's, which its failover
// run runs) and disabled items, with the sharding node's version.
// The claims of its items and their failover marks (the epochs) come from
// view, this server's last direct read of them (see failoverViewCurrent);
// with view nil, or for an item view lacks, they are read directly
// (pipelined) and kept as the new view.
//
// An item with a claim record (records) is read directly too: while its
// claim lives the item is skipped; a record whose claim is gone (the
// claimant's session ended) is a cut failover run, which this run re-runs
// and consumes (markRunning deletes the record, as it does a queue entry).
func (j *Job) assignments(ctx context.Context, total int, data []byte, st store.Stat, ok bool, view map[int]failover.ItemView, records map[int]bool) ([]Assignment, int32, map[int]failover.ItemView, error) {
	var out []Assignment
	if !ok {
		return nil, -1, view, nil
	}
	if jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NDisabled)) {
		return nil, st.Version, view, nil
	}
	items, err := layout.ParseItems(data)
	if err != nil {
		j.log.Error("malformed sharding node; running nothing until the next reshard", "node", j.p.Server(j.id, layout.NSharding), "err", err)
		return nil, st.Version, view, nil
	}
	var cand []int
	for _, it := range items {
		if it >= total {
			continue
		}
		disabled, err := j.nodes.ItemHas(ctx, layout.RelItem(it, layout.NDisabled))
		if err != nil {
			return nil, -1, nil, err
		}
		if disabled {
			continue
		}
		if j.fo.ClaimTaken(it) {
			continue // a failover run of this server runs it now
		}
		cand = append(cand, it)
	}
	var missing []int
	for _, it := range cand {
		// A claim seen on the item is read again: a claimer whose session
		// ends loses its claim (ephemeral) without a failover writer's
		// version bump, so the view would keep the item skipped for good
		// (memstore simulation seed 9317484). Claims are rare; marks are
		// persistent and only set with a bump, so they stay.
		if f, ok := view[it]; !ok || f.Claimed || records[it] {
			missing = append(missing, it)
		}
	}
	if len(missing) > 0 {
		if view, err = j.fo.ReadView(ctx, view, missing); err != nil {
			return nil, -1, nil, err
		}
	}
	for _, it := range cand {
		f := view[it]
		if f.Claimed {
			// Failed over to another server, or claimed by this one and
			// run by its failover run only: a normal run of it would
			// consume nothing, and the failover run after it would carry
			// the lower epoch (ZooKeeper simulation seed 1005053).
			continue
		}
		out = append(out, Assignment{Item: it, Epoch: max(st.Mzxid, f.Mark)})
	}
	return out, st.Version, view, nil
}

// Shards returns the run's items, failover items first.
func (r *Run) Shards() []Assignment { return slices.Clone(r.items) }

// snapshot returns the current config and its parsed item parameters
// together: one trigger's view of the config.
func (j *Job) snapshot() (jobconfig.Config, map[int]string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cfg, j.itemParams
}

// Fence is the run's ownership of its items as version checks for a
// transaction of the caller's (workflow.Steps.Record): it fails once the
// run no longer owns them, as CheckOwnership would, checked at its commit.
func (r *Run) Fence() []store.Op {
	return r.j.rn.Fence(r.shardVersion, r.live, failoverItems(r.items), r.written)
}

// Context is cancelled when the run loses ownership: session lost, job
// shut down or removed, or the ctx given to Begin ends.
func (r *Run) Context() context.Context { return r.ctx }

// KeepGoing is the check between streaming batches: false when paused,
// resharding is pending, the job is stopping, or ownership is lost.
func (r *Run) KeepGoing() bool {
	j := r.j
	if r.ctx.Err() != nil {
		return false
	}
	if r.shardMzxid != 0 {
		// Resharded since Begin: every commit of the run is fenced now. A
		// reshard waits for live markers, but one planned just before this
		// run's Begin committed does not see it. (A cache that has not loaded the node
		// yet lags; it does not make the run stale.)
		if _, st, ok := j.cache.Get(layout.RelServer(j.id, layout.NSharding)); ok && st.Mzxid > r.shardMzxid {
			return false
		}
	}
	return !jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NPaused)) && !j.cache.Has(layout.RelNecessary) && !jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NShutdown))
}

// CheckOwnership is the fencing check for commits: it syncs with the store
// and returns nil only if this run still owns item with the same epoch on a
// live session. Otherwise ErrNotOwner (or ErrSessionLost).
func (r *Run) CheckOwnership(ctx context.Context, item int) error {
	j := r.j
	var a *Assignment
	for i := range r.items {
		if r.items[i].Item == item {
			a = &r.items[i]
		}
	}
	if a == nil {
		return fmt.Errorf("coord: job %q: item %d is not part of this run: %w", j.jname, item, ErrNotOwner)
	}
	if err := j.st.Sync(ctx, j.p.Root); err != nil {
		return r.fenceErr("fencing sync", err)
	}
	sess, _ := j.st.Session()
	if sess.State != store.StateConnected || sess.ID != r.session {
		return fmt.Errorf("coord: job %q: item %d: session changed: %w", j.jname, item, ErrSessionLost)
	}
	if a.Failover {
		ok, st, err := j.st.Exists(ctx, j.p.Item(item, layout.NFailover))
		if err != nil {
			return r.fenceErr("fencing read", err)
		}
		if !ok || st.Czxid != a.Epoch || st.EphemeralOwner != r.session {
			return fmt.Errorf("coord: job %q: failover item %d (epoch %d): %w", j.jname, item, a.Epoch, ErrNotOwner)
		}
		return nil
	}
	// The epoch is also the item's failover mark when that is larger (see
	// failoverDone): a failover run that completed since this run began
	// changes it. The container is read beside the sharding node (one
	// round trip for both on ZooKeeper, whose client pipelines).
	type stat struct {
		ok  bool
		st  store.Stat
		err error
	}
	cont := make(chan stat, 1)
	go func() {
		ok, st, err := j.st.Exists(ctx, j.p.Item(item))
		cont <- stat{ok, st, err}
	}()
	data, st, err := j.st.Get(ctx, j.p.Server(j.id, layout.NSharding))
	c := <-cont
	if errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: job %q: item %d: %s is gone: %w", j.jname, item, j.p.Server(j.id, layout.NSharding), ErrNotOwner)
	}
	if err == nil {
		err = c.err
	}
	if err != nil {
		return r.fenceErr("fencing read", err)
	}
	ok, ist := c.ok, c.st
	epoch := st.Mzxid
	if ok {
		epoch = max(epoch, failover.Done(ist))
	}
	items, perr := layout.ParseItems(data)
	if perr != nil || epoch != a.Epoch || !slices.Contains(items, item) {
		return fmt.Errorf("coord: job %q: item %d (epoch %d, now %d): %w", j.jname, item, a.Epoch, epoch, ErrNotOwner)
	}
	return nil
}

// registrationGone reports whether the registration a call began under is
// no longer the live one (lost, replaced, or not yet renewed on a new
// session): a store error then means the session, not the protocol, failed.
func (j *Job) registrationGone() bool {
	sess, _ := j.st.Session()
	j.mu.Lock()
	defer j.mu.Unlock()
	return sess.ID != j.regSession || j.regCtx.Err() != nil
}

// fenceErr wraps a store error of a fencing check. When the run's session
// is no longer the live one (expired, replaced, or merely suspended, so that
// ownership cannot be confirmed) the error is ErrSessionLost as well, as
// CheckOwnership promises, whatever the store call reported.
func (r *Run) fenceErr(what string, err error) error {
	j := r.j
	sess, _ := j.st.Session()
	// A connection lost mid-call counts too: the client may not have
	// reported the suspension yet (seen on ZooKeeper, simulation seed
	// 200093), and ownership cannot be confirmed either way.
	if recipe.LostConnection(j.st, err) || sess.State != store.StateConnected || sess.ID != r.session {
		return fmt.Errorf("coord: job %q: %s: %w: %w", j.jname, what, ErrSessionLost, err)
	}
	return fmt.Errorf("coord: job %q: %s: %w", j.jname, what, err)
}

// CompleteWith is Complete recording the run's outcome with the
// completion, in the same transaction: the failing items (status shows
// each with its count of consecutive failed runs, since when, and its last
// error; JobStatus.Health is not "ok" while one fails) and, when
// out.Counts is set, the interval counts (as Job.ReportCounts writes
// them). Complete is CompleteWith an outcome of no error and no counts.
// Only the first call of a run records its outcome; a retry after an error
// writes the same.
func (r *Run) CompleteWith(ctx context.Context, next time.Time, out RunOutcome) error {
	j := r.j
	if r.done {
		return nil
	}
	if r.failing == nil {
		r.failing = j.failing.Note(itemNumbers(r.items), out.Errors, j.reg.cfg.Now())
	}
	r.counts = out.Counts
	defer func() { r.counts = nil }()
	if r.released && j.rn.HeldByAnotherRun(itemNumbers(r.items)) {
		// A retry after a refused Complete, too late: a later Begin removed
		// this run's leftover running nodes and runs the items now.
		r.done = true
		return fmt.Errorf("coord: job %q: complete: a later run of this server holds the items now: %w", j.jname, ErrNotOwner)
	}
	// The run is over for its pipeline whatever the outcome; the run is done
	// (later calls are no-ops) once the outcome is final: written, not
	// owned, the session gone, or the completion handed to the job because
	// ctx ended while the session was suspended. A store error on a live
	// session leaves it retryable.
	parked := false
	// cut: the last write failed on the connection (it may or may not
	// have deleted the live marker).
	cut := false
	defer func() {
		r.stop()
		r.cancel()
		if !r.released && !parked {
			// Whatever the outcome, the pipeline is over: the items are no
			// longer held by this run (see job.inRun). A run whose
			// completion is owed holds them until it is written.
			r.released = true
			j.releaseRun(r)
			if cut && r.live {
				// Owed once the run no longer holds the marker.
				j.rn.OweMarkerLeftover(r.session, r.begin, r.shardMzxid)
			}
		}
	}()
	for attempt := 0; ; attempt++ {
		sess, _ := j.st.Session()
		if sess.State == store.StateSuspended && sess.ID == r.session {
			// A connection blip: the run's session and its running nodes
			// live on. Wait (within ctx) for it to resume or end.
			sess, _ = store.AwaitSession(ctx, j.st, func(s store.Session) bool {
				return s.State != store.StateSuspended || s.ID != r.session
			})
		}
		if sess.State == store.StateConnected && sess.ID == r.session {
			err := r.apply(ctx, next)
			if err == nil || errors.Is(err, ErrNotOwner) {
				r.done = true
			}
			cut = err != nil && txn.Ambiguous(j.st, err)
			if err == nil || !recipe.LostConnection(j.st, err) {
				return err
			}
			if attempt < 2 {
				continue // the connection dropped during the write
			}
			return fmt.Errorf("%w: %w", ErrSessionLost, err)
		}
		r.done = true
		if sess.State == store.StateSuspended && sess.ID == r.session {
			// Still suspended when ctx ended. The live marker would
			// outlive the run on the resumed session and hold the leader's
			// reshard (which waits for live markers) and with it every
			// Begin: the completion is owed to the session (owe looks at
			// the session again, which may have resumed since it was read:
			// a completion kept for good kept the item running, simulation
			// seed 9978 of 9090).
			parked, r.released = true, true
			j.oweCompletion(r, next)
			return fmt.Errorf("coord: job %q: complete: %s; completing when it resumes: %w", j.jname, layout.SessionProblem(sess, r.session), ErrSessionLost)
		}
		// The run's session and its nodes are gone: nothing to complete.
		return fmt.Errorf("coord: job %q: complete: %s: %w", j.jname, layout.SessionProblem(sess, r.session), ErrSessionLost)
	}
}

// apply writes a run's completion on its connected session; see complete.
// It runs on the caller's goroutine, or on payDebts' for an owed
// completion (complete has then marked the run done): it leaves r.done and
// r.released alone.
//
// A normal run writes one Multi whatever its items: the run record with
// the completion (and the next fire time), the live marker deleted, status
// READY. A failover run completes per item: running deleted,
// lastCompleteTime, the item's failover mark (its container's data, which
// the owner's next epoch takes: failoverDone), the claim deleted, and the
// failover directory's version bumped (a normal Begin of the item's owner
// planned before this completion must plan again, on the new mark).
func (r *Run) apply(ctx context.Context, next time.Time) error {
	j := r.j
	nowText := layout.FormatTimeText(j.reg.cfg.Now())
	if r.quietComplete(nowText, next) {
		return nil // an unmonitored run's record holds already (quiet.go); the counts and its times wait for the interval report
	}
	now := []byte(nowText)
	var head []txn.Intent
	groups, anyFailover := r.failoverCompletions(now)
	if anyFailover {
		head = append(head, failover.BumpDir())
	}
	tail := r.recordCompletion(now, next)
	if c := r.counts; c != nil && !c.Written && !j.isRemoved() {
		// The interval counts go with the completion (no write of their
		// own); the totals are held until the outcome is known.
		j.totals.Lock()
		defer j.totals.Unlock()
		ins, ts, tf, err := j.totals.Intents(ctx, c.Success, c.Failure)
		if err != nil {
			return err
		}
		tail = append(tail, ins...)
		defer func() {
			if c.Written {
				j.totals.SetLocked(ts, tf)
			}
		}()
	}
	err := r.commitCompletion(ctx, head, groups, tail, anyFailover)
	r.dropClaims(ctx, err == nil)
	if err != nil {
		if errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: job %q: complete: this server's nodes are gone: %w", j.jname, ErrNotOwner)
		}
		return fmt.Errorf("coord: job %q: complete: %w", j.jname, err)
	}
	if r.counts != nil {
		r.counts.Written = true
	}
	r.noteCompleted()
	return nil
}

// failoverCompletions are the completion's writes per failover item:
// running deleted, lastCompleteTime, the mark the item's next normal run
// takes its epoch from (failoverDone: its zxid is above this run's
// epoch), the failover mark and the claim's record deleted. failover says
// the run has such items.
func (r *Run) failoverCompletions(now []byte) (groups [][]txn.Intent, failover bool) {
	groups = make([][]txn.Intent, 0, len(r.items))
	for _, a := range r.items {
		if !a.Failover {
			continue
		}
		failover = true
		groups = append(groups, []txn.Intent{
			{Kind: txn.DeleteIfPresent, Rel: layout.RelItem(a.Item, layout.NRunning)},
			{Kind: txn.Put, Rel: layout.RelItem(a.Item, layout.NLastCompleteTime), Data: now},
			{Kind: txn.Set, Rel: layout.RelItem(a.Item)},
			{Kind: txn.DeleteIfPresent, Rel: layout.RelItem(a.Item, layout.NFailover)},
			// The claim's record (claimrecord.go), read directly: left
			// behind by a cache that lagged, the leader would take it
			// for a lost claim and the item would run again.
			{Kind: txn.DeleteIfPresentRead, Rel: layout.RelClaim(a.Item)}})
	}
	return groups, failover
}

// recordCompletion are the completion's writes for the server: status
// READY (unless it was shut down mid-run: it has no status node any
// more) and a normal run's record with its completion and next fire time.
func (r *Run) recordCompletion(now []byte, next time.Time) []txn.Intent {
	j := r.j
	var tail []txn.Intent
	j.mu.Lock()
	offline := j.offline || j.removed
	j.mu.Unlock()
	if len(r.items) > 0 && !offline {
		tail = append(tail, txn.Intent{Kind: txn.Set, Rel: layout.RelServer(j.id, layout.NStatus), Data: []byte(layout.StatusReady)})
	}
	var nextText string
	if !next.IsZero() {
		nextText = layout.FormatTimeText(next)
	}
	if rec, ok := runRecordOf(r.items, r.begin, string(now), r.cfg.MonitorsExecution(), r.shardMzxid); ok {
		rec.Next = nextText
		rec.Failing = r.failing
		tail = append(tail, txn.Intent{Kind: txn.Put, Rel: layout.RelServer(j.id, layout.NRun), Data: layout.EncodeRunRecord(rec)})
	}
	return tail
}

// commitCompletion commits the completion with the live marker's delete
// (beyond the store's request limit, in parts, internal/txn/split.go: only failover
// runs have per-item groups). A marker gone already (a session change
// removed it with the run's ephemerals, or a Begin of this server removed
// it as a leftover) leaves the completion written without it; an item's
// node gone (pruned by the leader after the total was lowered below it)
// leaves its completion moot, the rest written.
func (r *Run) commitCompletion(ctx context.Context, head []txn.Intent, groups [][]txn.Intent, tail []txn.Intent, failover bool) error {
	j := r.j
	withMarker := tail
	if r.live {
		withMarker = append(slices.Clone(tail), txn.Intent{Kind: txn.Delete, Rel: layout.RelServer(j.id, layout.NRun, layout.NLive)})
	}
	applied, err := j.tx.CommitSplit(ctx, head, groups, withMarker)
	if r.live && (errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrNoParent)) {
		if ok, _, xerr := j.st.Exists(ctx, j.p.Server(j.id, layout.NRun, layout.NLive)); xerr == nil && !ok {
			_, err = j.tx.CommitSplit(ctx, head, groups[applied:], tail)
		}
	}
	if failover && (errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrNoParent)) {
		var kept [][]txn.Intent
		for i, a := range r.items {
			ok, _, xerr := j.st.Exists(ctx, j.p.Item(a.Item))
			if xerr != nil || ok {
				kept = append(kept, groups[i])
			}
		}
		if len(kept) < len(groups) {
			_, err = j.tx.CommitSplit(ctx, head, kept, tail)
		}
	}
	return err
}

// dropClaims forgets the run's failover claims. After a completion
// written (committed), the mark just written goes into the cache first
// (until then this server's Begins skip the items): a Begin of this
// server must not take an item's epoch from before its failover run.
func (r *Run) dropClaims(ctx context.Context, committed bool) {
	j := r.j
	if committed {
		for _, a := range r.items {
			if !a.Failover {
				continue
			}
			if ok, st, xerr := j.st.Exists(ctx, j.p.Item(a.Item)); xerr == nil && ok {
				j.cache.NoteItemStat(layout.RelItem(a.Item), st)
			}
		}
	}
	j.fo.Ended(failoverItems(r.items))
}

// itemNumbers returns the items of as.
func itemNumbers(as []Assignment) []int {
	items := make([]int, len(as))
	for i, a := range as {
		items[i] = a.Item
	}
	return items
}

// failoverItems returns the items of the failover assignments of as.
func failoverItems(as []Assignment) []int {
	var items []int
	for _, a := range as {
		if a.Failover {
			items = append(items, a.Item)
		}
	}
	return items
}

// isRemoved reports whether the job was removed from the namespace.
func (j *Job) isRemoved() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.removed
}

// oweCompletion owes r's completion to its session, suspended when
// Complete ended: the job's debts (recipe.Debts) write it when the session resumes (on the
// watcher, before a Once registers, or at a leave), and the run holds its
// items and live marker until then; a session that ends instead drops it
// (the run's nodes went with it). A run no longer the owner counts as
// completed.
func (j *Job) oweCompletion(r *Run, next time.Time) {
	j.debts.Owe(r.session, fmt.Sprintf("the completion of the run of items %v", r.items), func(ctx context.Context) error {
		if err := r.apply(ctx, next); err != nil && !errors.Is(err, ErrNotOwner) {
			return err
		}
		return nil
	}, func() { j.releaseRun(r) })
}

// releaseRun drops a run's hold on its items and the live marker.
func (j *Job) releaseRun(r *Run) {
	j.rn.HoldItems(itemNumbers(r.items), -1)
	if r.live {
		j.rn.HoldMarker(r.session, -1)
	}
}

func (j *Job) myItems() []int {
	d, _, ok := j.cache.Get(layout.RelServer(j.id, layout.NSharding))
	if !ok {
		return nil
	}
	items, _ := layout.ParseItems(d)
	return items
}

// TakeMisfire reports whether a catch-up run is due: misfire is on, no
// resharding is pending, and one of this server's items is flagged misfire.
// The flags are cleared. Called after Complete.
func (j *Job) TakeMisfire(ctx context.Context) (bool, error) {
	cfg := j.Config()
	if !cfg.MisfireEnabled() {
		return false, nil
	}
	// No flag on the cached items: no catch-up, and no read (a trigger's
	// common case). Otherwise direct reads: the flag and the assignment
	// must not lag behind the run that just completed.
	if jobnodes.NoCachedMisfire(j.cache, j.id, cfg.ShardingTotalCount) {
		return false, nil
	}
	nec, _, err := j.st.Exists(ctx, j.p.Abs(layout.RelNecessary))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Abs(layout.RelNecessary), err)
	}
	if nec {
		return false, nil
	}
	data, _, err := j.st.Get(ctx, j.p.Server(j.id, layout.NSharding))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Server(j.id, layout.NSharding), err)
	}
	if err != nil || jobnodes.CachedFlag(j.cache, layout.RelServer(j.id, layout.NDisabled)) {
		return false, nil
	}
	mine, perr := layout.ParseItems(data)
	if perr != nil {
		return false, nil
	}
	var ins []txn.Intent
	for _, it := range mine {
		if it >= cfg.ShardingTotalCount {
			continue
		}
		if flagged, err := j.nodes.ItemHas(ctx, layout.RelItem(it, layout.NMisfire)); err != nil {
			return false, err
		} else if flagged {
			ins = append(ins, txn.Intent{Kind: txn.DeleteIfPresent, Rel: layout.RelItem(it, layout.NMisfire)})
		}
	}
	if len(ins) == 0 {
		return false, nil
	}
	if _, err := j.tx.CommitSplit(ctx, nil, txn.Each(ins), nil); err != nil {
		return false, fmt.Errorf("coord: job %q: clear misfire: %w", j.jname, err)
	}
	return true, nil
}

// RecordNextFireTime writes execution/{item}/nextFireTime for this server's items.
func (j *Job) RecordNextFireTime(ctx context.Context, next time.Time) error {
	var groups [][]txn.Intent
	for _, it := range j.myItems() {
		groups = append(groups, []txn.Intent{
			{Kind: txn.CreateIfAbsent, Rel: layout.RelItem(it)},
			{Kind: txn.Put, Rel: layout.RelItem(it, layout.NNextFireTime), Data: layout.FormatTime(next)}})
	}
	if _, err := j.tx.CommitSplit(ctx, nil, groups, nil); err != nil {
		return fmt.Errorf("coord: job %q: record nextFireTime: %w", j.jname, err)
	}
	return nil
}

// ReportCounts writes the last interval's counts to
// servers/{id}/processSuccessCount and processFailureCount (one transaction).
//
// reportCounts writes the interval's counts and the cumulative totals in
// one transaction. The totals are read from the store once (they
// survive restarts), then kept here: only this server
// writes its own nodes. They advance only when the write succeeds, since
// the stats reporter re-reports counts whose write failed.
func (j *Job) ReportCounts(ctx context.Context, success, failure int64) error {
	j.totals.Lock()
	defer j.totals.Unlock()
	ins, ts, tf, err := j.totals.Intents(ctx, success, failure)
	if err != nil {
		return err
	}
	// The times of an unmonitored job's last run that wrote nothing go
	// with the report (quiet.go), fenced by the plan they belong to: a
	// plan changed since reports the counts alone.
	var fence, rec []txn.Intent
	j.mu.Lock()
	reg := j.regSession
	j.mu.Unlock()
	plan, failing, pending, ok := j.quiet.Pending(reg)
	if ok {
		fence, rec = quietReport(j.id, plan, failing, pending)
	}
	err = j.tx.Commit(ctx, slices.Concat(fence, ins, rec))
	if rec != nil && errors.Is(err, store.ErrBadVersion) {
		rec = nil
		err = j.tx.Commit(ctx, ins)
	}
	if err != nil {
		return fmt.Errorf("coord: job %q: report counts to %s: %w", j.jname, j.p.Server(j.id), err)
	}
	j.totals.SetLocked(ts, tf)
	if rec != nil {
		j.quiet.Reported(pending)
	}
	return nil
}

// runRecordOf is the run record of the normal items of a run (false: a
// failover run, or no items, which writes none).
func runRecordOf(items []Assignment, begin, complete string, monitor bool, epoch int64) (layout.RunRecord, bool) {
	var its []int
	for _, a := range items {
		if !a.Failover {
			its = append(its, a.Item)
		}
	}
	if len(its) == 0 {
		return layout.RunRecord{}, false
	}
	slices.Sort(its)
	return layout.RunRecord{Layout: layout.RecordLayout, Items: its, Begin: begin, Complete: complete, Monitor: monitor, Epoch: epoch}, true
}

package protocol

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// Leaving many jobs at once (Registry.Close).
//
// A job's leave is its watcher's stop, the writes owed to its session
// (completions a suspended session kept among them), then goOffline: its election nodes and status node
// deleted, the membership version bumped and the resharding flag raised
// (the flag version bumped), one transaction plus the flag's create beside
// it. Leaving thousands of jobs one transaction each takes thousands of
// ZooKeeper writes, each a log entry on the server. leaveJobs does every
// job's local part side by side, then packs the jobs' offline operations
// into shared Multis (leaveBatchJobs per Multi, below the store's request
// limit). Each job's operations stay together in one Multi, so every job
// still leaves atomically, and what the protocol relies on is the same as
// goOfflineAtOnce writes: the flag raised and its version bumped, the
// membership version bumped, the host and candidate deleted.
//
// The flag is put in the shared Multi only when the job's tree cache shows
// no flag (a flag present makes the create fail, and the whole Multi with
// it); a job whose cache shows one raises it beside the Multi as
// goOfflineAtOnce does. A Multi that fails (the cache was behind on a flag,
// a node was not as expected) changed nothing: each of its jobs then
// leaves alone, through goOffline.

// leaveBatchJobs bounds the jobs of one shared leave Multi: a Multi that
// fails on one job's node sends all of its jobs through goOffline, one by
// one, so batches are kept moderate.
const leaveBatchJobs = 128

// leaveParallel bounds the jobs whose local leave (or whose read of the
// host node, or whose fallback goOffline) runs at once, and leaveMultis
// the shared Multis in flight.
const (
	leaveParallel = 64
	leaveMultis   = 4
)

// leaveJobs leaves every job of jobs (Registry.Close): the same outcome as
// each job's leave, with the store writes shared (see the top of this
// file).
func leaveJobs(ctx context.Context, jobs []*Job) error {
	var (
		mu      sync.Mutex
		errs    []error
		offline []*Job
	)
	addErr := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var g errgroup.Group
	g.SetLimit(leaveParallel)
	for _, j := range jobs {
		g.Go(func() error {
			online, err := j.leaveLocal(ctx)
			if err != nil {
				addErr(err)
			}
			if online {
				mu.Lock()
				offline = append(offline, j)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if err := goOfflineAll(ctx, offline); err != nil {
		addErr(err)
	}
	return errors.Join(errs...)
}

// offlinePlan is one job's part of a shared leave Multi.
type offlinePlan struct {
	j   *Job
	ops []store.Op
	// flagBeside: the flag is raised beside the Multi (the cache shows one).
	flagBeside bool
}

// goOfflineAll takes every job of jobs offline, their operations packed
// into shared Multis; a job that cannot be planned, or whose Multi fails,
// goes through goOffline alone.
func goOfflineAll(ctx context.Context, jobs []*Job) error {
	if len(jobs) == 0 {
		return nil
	}
	l := &sharedLeave{st: jobs[0].st}
	sess, _ := l.st.Session()
	plans := make([]*offlinePlan, len(jobs))
	var g errgroup.Group
	g.SetLimit(leaveParallel)
	for i, j := range jobs {
		g.Go(func() error {
			plans[i] = l.plan(ctx, j, sess)
			return nil
		})
	}
	_ = g.Wait()
	var mg errgroup.Group
	mg.SetLimit(leaveMultis)
	for _, b := range l.batch(jobs, plans, jobs[0].tx.SplitBudget()) {
		mg.Go(func() error {
			l.commit(ctx, b)
			return nil
		})
	}
	_ = mg.Wait()
	var ag errgroup.Group
	ag.SetLimit(leaveParallel)
	for _, j := range l.alone {
		ag.Go(func() error {
			if err := j.rg.Offline(ctx); err != nil {
				l.fail(err)
			}
			return nil
		})
	}
	_ = ag.Wait()
	return errors.Join(l.errs...)
}

// sharedLeave is one goOfflineAll: the jobs left to go offline alone, and
// the errors met.
type sharedLeave struct {
	st    store.Store
	mu    sync.Mutex
	errs  []error
	alone []*Job
}

// fail records err.
func (l *sharedLeave) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// leaveAlone sends j through goOffline alone.
func (l *sharedLeave) leaveAlone(j *Job) {
	l.mu.Lock()
	l.alone = append(l.alone, j)
	l.mu.Unlock()
}

// batch packs plans (of jobs, in order) into Multis of at most
// leaveBatchJobs jobs within budget bytes; a job without a plan leaves
// alone.
func (l *sharedLeave) batch(jobs []*Job, plans []*offlinePlan, budget int) [][]*offlinePlan {
	var batches [][]*offlinePlan
	var cur []*offlinePlan
	size := 32
	for i, p := range plans {
		if p == nil {
			l.leaveAlone(jobs[i])
			continue
		}
		ps := 0
		for _, op := range p.ops {
			ps += store.OpSize(op)
		}
		if len(cur) > 0 && (len(cur) == leaveBatchJobs || size+ps > budget) {
			batches = append(batches, cur)
			cur, size = nil, 32
		}
		cur = append(cur, p)
		size += ps
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches
}

// commit takes batch b's jobs offline in one Multi, each job's flag
// raised beside it when its cache shows none; the jobs of a failed Multi
// leave alone.
func (l *sharedLeave) commit(ctx context.Context, b []*offlinePlan) {
	var ops []store.Op
	for _, p := range b {
		ops = append(ops, p.ops...)
	}
	flags := make([]chan error, len(b))
	for k, p := range b {
		if p.flagBeside {
			flags[k] = make(chan error, 1)
			go func() { flags[k] <- layout.RaiseFlag(ctx, l.st, p.j.p) }()
		}
	}
	_, err := l.st.Multi(ctx, ops...)
	for k, p := range b {
		var ferr error
		if flags[k] != nil {
			ferr = <-flags[k]
		}
		switch {
		case err != nil:
			l.leaveAlone(p.j)
		case ferr != nil && !errors.Is(ferr, store.ErrNoNode) && !errors.Is(ferr, store.ErrClosed):
			// Offline, but the flag's create failed: raise it
			// again as goOffline would.
			if ferr := layout.RaiseFlag(ctx, l.st, p.j.p); ferr != nil && !errors.Is(ferr, store.ErrNoNode) && !errors.Is(ferr, store.ErrClosed) {
				l.fail(ferr)
			}
			p.j.rg.WentOffline()
		default:
			p.j.rg.WentOffline()
		}
	}
}

// plan returns j's operations for a shared leave Multi: those of
// registration.OfflineAtOnce, with the flag's create and version bump when
// j's cache shows no flag. nil: j leaves alone (Offline), as OfflineAtOnce
// would not do it at once.
func (l *sharedLeave) plan(ctx context.Context, j *Job, sess store.Session) *offlinePlan {
	ops := j.rg.OfflineOps(ctx, sess)
	if ops == nil {
		return nil
	}
	p := &offlinePlan{j: j, ops: ops}
	if j.cache.Has(layout.RelNecessary) {
		p.flagBeside = true
	} else {
		// raiseFlag's two operations, in the same transaction.
		p.ops = append(p.ops, layout.RaiseFlagOps(j.p)...)
	}
	return p
}

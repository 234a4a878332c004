// Package runs keeps what this process's runs of a job hold (the items
// and the live marker, from a Begin's transaction until its Complete
// returns) and settles what runs that ended without their writes left
// behind: a live marker or a running node of this session no run holds, a
// run record without its completion; and a Begin that finds its items
// running flags them misfire.
package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/failover"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
)

// ErrItemsRunning: Begin found an item of this server still running; the
// items were flagged misfire (when enabled) and no run starts.
var ErrItemsRunning = errors.New("coord: shard items still running; trigger recorded as misfire")

// Config is what a Runs is built on: the job's handles.
type Config struct {
	Store  store.Store
	Paths  layout.JobPaths
	Job    string // the job's name
	Server string // this server's id
	Log    *slog.Logger
	Tx     txn.Committer
	// Debts are the job's writes owed to their session (the leftovers'
	// settling is one).
	Debts *recipe.Debts
	// Mu is the job's mutex: it guards inRun and markerRuns.
	Mu *sync.Mutex
	// RegSessionLocked returns the registration's session; the caller
	// holds Mu.
	RegSessionLocked func() int64
	// Now is the local clock.
	Now func() time.Time
}

// Runs is what this process's runs of a job hold, and the settling of
// what ended runs left. Safe for concurrent use.
type Runs struct {
	st               store.Store
	p                layout.JobPaths
	jname            string
	id               string
	log              *slog.Logger
	tx               txn.Committer
	debts            *recipe.Debts
	now              func() time.Time
	RegSessionLocked func() int64

	mu *sync.Mutex
	// inRun counts, per item, the runs of this process that Begin is
	// marking or marked running and whose Complete has not returned yet. A running node of
	// this server's session on an item outside inRun is a leftover of a run
	// whose Complete was refused while the session was suspended (the
	// session came back, so the ephemeral node did not go): Begin removes
	// it instead of calling the trigger a misfire for ever.
	inRun map[int]int
	// markerRuns counts, per session, the runs of this process holding the
	// live marker servers/{id}/run/live (from before Begin's Multi until
	// Complete returns): a marker of this session while none does is a
	// leftover.
	markerRuns map[int64]int
}

// New returns the runs of the job c describes.
func New(c Config) *Runs {
	return &Runs{
		st: c.Store, p: c.Paths, jname: c.Job, id: c.Server, log: c.Log, tx: c.Tx, debts: c.Debts, now: c.Now,
		RegSessionLocked: c.RegSessionLocked, mu: c.Mu,
	}
}

// MarkerInTheWay handles a Begin whose live marker exists already: left by
// a run of this server on this session that no run of this process holds
// any more (a Begin whose reply was lost, a Complete refused while the
// session was suspended), it is deleted (versioned) and the Begin plans
// again; otherwise a run holds it and the items misfire.
func (r *Runs) MarkerInTheWay(ctx context.Context, cfg jobconfig.Config, items []int) error {
	p := r.p.Server(r.id, layout.NRun, layout.NLive)
	ok, st, err := r.st.Exists(ctx, p)
	if err != nil {
		return fmt.Errorf("coord: job %q: read %s: %w", r.jname, p, err)
	}
	if !ok {
		return fmt.Errorf("coord: job %q: mark items running: %w", r.jname, ErrBeginAgain)
	}
	if r.MarkerLeftByEndedRun(st) {
		if err := r.st.Delete(ctx, p, st.Version); err == nil || errors.Is(err, store.ErrNoNode) {
			r.log.Info("removed the live marker left by an earlier run of this server whose Complete was refused while the session was suspended", "job", r.jname)
			return fmt.Errorf("coord: job %q: mark items running: %w", r.jname, ErrBeginAgain)
		} else if !errors.Is(err, store.ErrBadVersion) {
			return fmt.Errorf("coord: job %q: delete leftover %s: %w", r.jname, p, err)
		}
	}
	return r.FlagMisfire(ctx, cfg, items)
}

// OweMarkerLeftover owes session sid the settling of what a Begin's or a
// Complete's transaction that failed on the connection, or whose ctx ended
// in flight, may have left, once no run of this process holds the marker:
// the transaction may have been applied (a Begin's reply lost, or its ctx
// cancelled by a stop) or not (a Complete's write not made). Two things
// are settled, in one transaction:
//
//   - the live marker, an ephemeral of a session that may resume, which
//     would hold the leader's reshard (firstRunning) until this server's
//     next Begin removed it (markerInTheWay), up to a cron period later;
//   - the run record that transaction wrote (begin and epoch name it),
//     still without a completion: no run of this process runs it (the
//     Begin failed, or the run ended), and a record left incomplete when
//     the marker goes (deleted here, or with the session at the process's
//     exit) is what the leader's failover scan takes for a crashed run
//     (findOrphans): a graceful stop whose Begin was cancelled in flight
//     had its items failed over (examples/pgbatch's TestRollingRestart
//     under load). It gets its completion time.
//
// Paid as soon as the session is connected again, and at a leave before
// the server goes offline (recipe.Debts).
func (r *Runs) OweMarkerLeftover(sid int64, begin string, epoch int64) {
	p := r.p.Server(r.id, layout.NRun, layout.NLive)
	r.debts.Owe(sid, "settle the run record and live marker "+p+" no run holds", func(ctx context.Context) error {
		for attempt := 0; ; attempt++ {
			err := r.SettleLeftover(ctx, sid, begin, epoch)
			if attempt < 2 && (errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrBadVersion)) {
				continue // changed between the reads and the write: look again
			}
			return err
		}
	}, nil)
}

// SettleLeftover is oweMarkerLeftover's payment: the marker deleted if it
// is session sid's and no run of this process holds it, and the run record
// of the Begin at begin on the sharding node of Mzxid epoch completed if it
// is still without a completion, both versioned, in one transaction.
func (r *Runs) SettleLeftover(ctx context.Context, sid int64, begin string, epoch int64) error {
	marker, recPath := r.p.Server(r.id, layout.NRun, layout.NLive), r.p.Server(r.id, layout.NRun)
	ok, st, err := r.st.Exists(ctx, marker)
	if err != nil {
		return err
	}
	// A marker of another session, or one a run of this process holds (a
	// later Begin's), belongs to that run, and so does the record then.
	if ok && (st.EphemeralOwner != sid || !r.MarkerLeftByEndedRun(st)) {
		return nil
	}
	var ops []store.Op
	if ok {
		ops = append(ops, &store.DeleteOp{Path: marker, Version: st.Version})
	}
	data, recSt, err := r.st.Get(ctx, recPath)
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return err
	}
	if err == nil {
		rec, derr := layout.DecodeRunRecord(data)
		if derr == nil && rec.Complete == "" && !rec.Queued && rec.Begin == begin && rec.Epoch == epoch {
			rec.Complete = string(layout.FormatTime(r.now()))
			ops = append(ops, &store.SetOp{Path: recPath, Data: layout.EncodeRunRecord(rec), Version: recSt.Version})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := r.st.Multi(ctx, ops...); err != nil {
		return err
	}
	r.log.Info("settled the run record and live marker left on this session by a Begin or Complete whose transaction failed in flight", "job", r.jname)
	return nil
}

// UndoBegin reverts the parts of a split Begin that were applied before a
// later part failed: the queue entries those parts consumed come back, a
// failover item's running node goes. The run does not start. If the undo
// fails too, running nodes are ephemeral: they go with the session.
func (r *Runs) UndoBegin(ctx context.Context, items []int, applied [][]txn.Intent) {
	var groups [][]txn.Intent
	for _, g := range applied {
		for _, in := range g {
			switch {
			case in.Kind == txn.Delete && strings.HasPrefix(in.Rel, layout.RelFailoverQ+"/"):
				// A consumed claim record comes back as a queue entry: the
				// token of a cut run, which any server may claim.
				rel := in.Rel
				if it, ok := layout.ParseClaimName(strings.TrimPrefix(rel, layout.RelFailoverQ+"/")); ok {
					rel = layout.RelFailoverQ + "/" + strconv.Itoa(it)
				}
				groups = append(groups, []txn.Intent{{Kind: txn.CreateIfAbsent, Rel: rel}})
			case in.Kind == txn.Create && strings.HasSuffix(in.Rel, "/"+layout.NRunning):
				groups = append(groups, []txn.Intent{{Kind: txn.DeleteIfPresent, Rel: in.Rel}})
			}
		}
	}
	var head []txn.Intent
	if len(groups) > 0 {
		head = []txn.Intent{failover.BumpDir()}
	}
	if _, err := r.tx.CommitSplit(context.WithoutCancel(ctx), head, groups, nil); err != nil {
		r.log.Warn("cannot undo a partial Begin", "items", len(items), "err", err)
	}
}

// FlagMisfire flags items misfire (when enabled) and returns
// ErrItemsRunning: they run in a run of this server now.
func (r *Runs) FlagMisfire(ctx context.Context, cfg jobconfig.Config, running []int) error {
	if cfg.MisfireEnabled() {
		var groups [][]txn.Intent
		for _, it := range running {
			groups = append(groups, []txn.Intent{{Kind: txn.CreateIfAbsent, Rel: layout.RelItem(it)}, {Kind: txn.CreateIfAbsent, Rel: layout.RelItem(it, layout.NMisfire)}})
		}
		if _, err := r.tx.CommitSplit(ctx, nil, groups, nil); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: job %q: flag misfire on items %v: %w", r.jname, running, err)
		}
	}
	return fmt.Errorf("coord: job %q: items %v: %w", r.jname, running, ErrItemsRunning)
}

// MisfireIfRunning checks suspects (failover items found with a running
// node) directly; a node left by an ended run of this server is removed,
// and if any really runs, it flags them misfire (when enabled) and returns
// ErrItemsRunning.
func (r *Runs) MisfireIfRunning(ctx context.Context, cfg jobconfig.Config, suspects []int) error {
	var running, stale []int
	for _, it := range suspects {
		p := r.p.Item(it, layout.NRunning)
		ok, st, err := r.st.Exists(ctx, p)
		if err != nil {
			return fmt.Errorf("coord: job %q: read %s: %w", r.jname, p, err)
		}
		if !ok {
			continue
		}
		if r.LeftByEndedRun(it, st) {
			if err := r.st.Delete(ctx, p, st.Version); err == nil || errors.Is(err, store.ErrNoNode) {
				stale = append(stale, it)
				continue
			} else if !errors.Is(err, store.ErrBadVersion) {
				return fmt.Errorf("coord: job %q: delete leftover %s: %w", r.jname, p, err)
			}
		}
		running = append(running, it)
	}
	if len(stale) > 0 {
		r.log.Info("removed running nodes left by an earlier failover run of this server", "job", r.jname, "items", stale)
	}
	if len(running) == 0 {
		return nil
	}
	return r.FlagMisfire(ctx, cfg, running)
}

// HoldMarker adds delta to the count of this process's runs on session
// sid holding the live marker (markerRuns).
func (r *Runs) HoldMarker(sid int64, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.markerRuns == nil {
		r.markerRuns = make(map[int64]int)
	}
	if r.markerRuns[sid] += delta; r.markerRuns[sid] <= 0 {
		delete(r.markerRuns, sid)
	}
}

// MarkerLeftByEndedRun reports whether the live marker (its Stat st) was
// created on this server's current registration while no run of this
// process holds it.
func (r *Runs) MarkerLeftByEndedRun(st store.Stat) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return st.EphemeralOwner != 0 && st.EphemeralOwner == r.RegSessionLocked() && r.markerRuns[r.RegSessionLocked()] == 0
}

// HoldItems adds delta to the count of this process's runs holding each
// item (inRun).
func (r *Runs) HoldItems(items []int, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inRun == nil {
		r.inRun = make(map[int]int)
	}
	for _, it := range items {
		if r.inRun[it] += delta; r.inRun[it] <= 0 {
			delete(r.inRun, it)
		}
	}
}

// HeldByAnotherRun reports whether a run of this process holds any of items.
func (r *Runs) HeldByAnotherRun(items []int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		if r.inRun[it] > 0 {
			return true
		}
	}
	return false
}

// LeftByEndedRun reports whether the running node of item (its stat st) was
// written on this server's current registration while no run of this
// process holds the item.
func (r *Runs) LeftByEndedRun(item int, st store.Stat) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return st.EphemeralOwner != 0 && st.EphemeralOwner == r.RegSessionLocked() && r.inRun[item] == 0
}

// ErrBeginAgain says the items were found not running after all: the
// Begin plans again.
var ErrBeginAgain = errors.New("coord: items not running after all; begin again")

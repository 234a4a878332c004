// Package unmonitored keeps what lets the runs of a job with
// monitorExecution off write nothing trigger after trigger: the plan of the
// last Begin that wrote (Basis) and what the run record holds since. The
// protocol's Begin, Complete and interval report ask it whether they may
// leave the store alone.
//
// A run of a job with monitorExecution off has nothing for the protocol to
// record per trigger: no live marker (nothing waits for it, nothing fails
// it over), no status RUNNING (nothing is running for the protocol), and
// its counts go with the interval report (processCountIntervalSeconds), as
// in ElasticJob. What it still writes is its run record, for status (the
// run's items, epoch, failing items, times) and, like every Begin, the
// version checks that make its plan the store's at commit. Both are the
// same trigger after trigger while nothing changes, so such a run writes
// them only when something did (docs/zookeeper-layout.md, "Unmonitored
// runs"):
//
//   - its Begin writes (one transaction, fenced as a monitored one) when
//     its plan differs from the plan of the last Begin of this
//     registration that wrote (Basis): other items or epochs, another
//     version of its sharding node, of the flag directory or of the
//     failover directory, queue entries or claim records to consume, a
//     plan not taken from the tree cache, a record without completion or
//     with other failing items; otherwise it sends nothing (0 requests);
//   - its Complete writes the completion when its Begin wrote, or when the
//     run's failing items differ from the record's; otherwise nothing (the
//     counts it was given stay unwritten: CountReport.Written false);
//   - the interval report (the job's ReportCounts, every
//     processCountIntervalSeconds) writes, with the counts, the record of the kept plan with the times
//     of its newest run that wrote nothing, so that status's times are at
//     most one interval old.
//
// Why the version checks may be left out of a Begin that plans what the
// basis planned: a cache behind the store hides a reshard (the run's epoch
// is then the old sharding node's, and CheckOwnership, which reads the
// sharding node and the item's failover mark directly, refuses its
// commits), a raised flag (with monitorExecution off the reshard never
// waits for a run: a run begun on a flag the cache has not shown is one
// begun just before it) or a failover writer. A claim needs a queue entry
// of the item; an entry of an item of this server's current assignment
// comes only from a reshard (its sharding node changes: fenced as above)
// or from the leader queueing a lost claim again, which sets the item's
// failover mark (the epoch changes: fenced as above); and with the stored
// config unmonitored no claim can be made (the claim's transaction checks
// the config version). So a quiet run on a cache behind the store may run
// an item in vain, never commit beside another owner.
package unmonitored

import (
	"maps"
	"slices"
	"sync"

	"github.com/shardflow/shardflow/coord/internal/layout"
)

// Plan is a Begin's plan as a Basis compares it: the registration session
// it belongs to, the versions that fence it (sharding node, flag
// directory, failover directory; -1: not checked), the Mzxid of the
// sharding node its epochs come from, and its items (A: the protocol's
// Assignment).
type Plan[A comparable] struct {
	Session                              int64
	ShardVersion, FlagVersion, FoVersion int32
	ShardMzxid                           int64
	Items                                []A
}

// Times are a run's begin, completion and next fire times, as its record
// holds them.
type Times struct{ Begin, Complete, Next string }

// Basis is the last Begin of an unmonitored normal run that wrote its
// transaction, and what the run record holds since (failing items,
// completion), with the times of the newest run of its plan that wrote
// nothing (pending, for the interval report). Safe for concurrent use; the
// zero Basis holds none.
type Basis[A comparable] struct {
	mu        sync.Mutex
	plan      Plan[A] // Session 0: none (a monitored or failover Begin since, or never)
	failing   map[int]layout.ItemFailure
	completed bool
	pending   Times // zero: none
}

// Same reports whether a Begin of p, on the job's current registration
// session reg, with failing items failing, plans what the basis planned on
// a record that needs no rewrite (completed, the same failing items).
func (b *Basis[A]) Same(p Plan[A], reg int64, failing map[int]layout.ItemFailure) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.plan
	return q.Session != 0 && q.Session == p.Session && q.Session == reg &&
		q.ShardVersion == p.ShardVersion && q.FlagVersion == p.FlagVersion && q.FoVersion == p.FoVersion &&
		q.ShardMzxid == p.ShardMzxid && slices.Equal(q.Items, p.Items) &&
		b.completed && maps.Equal(b.failing, failing)
}

// Note makes p, written with failing items failing, the basis: its record
// has no completion yet (unless p has no items).
func (b *Basis[A]) Note(p Plan[A], failing map[int]layout.ItemFailure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p.Items = slices.Clone(p.Items)
	b.plan, b.failing, b.completed, b.pending = p, failing, len(p.Items) == 0, Times{}
}

// Reset ends the basis: the next unmonitored Begin writes.
func (b *Basis[A]) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.plan, b.failing, b.completed, b.pending = Plan[A]{}, nil, false, Times{}
}

// matchesLocked reports whether a run of the basis's session, sharding
// Mzxid and items is the basis's. b.mu is held.
func (b *Basis[A]) matchesLocked(session, mzxid int64, items []A) bool {
	return b.plan.Session == session && b.plan.ShardMzxid == mzxid && slices.Equal(b.plan.Items, items)
}

// Complete reports whether the Complete of a run that wrote nothing at its
// Begin (of session, mzxid, items, ending with failing items failing) may
// write nothing: the record the basis left is completed with the same
// failing items. The run's times t then wait for the interval report.
func (b *Basis[A]) Complete(session, mzxid int64, items []A, failing map[int]layout.ItemFailure, t Times) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.matchesLocked(session, mzxid, items) || !b.completed || !maps.Equal(b.failing, failing) {
		return false
	}
	b.pending = t
	return true
}

// NoteCompleted records a completion written for a run of the basis's
// plan: its record is completed, with failing items failing.
func (b *Basis[A]) NoteCompleted(session, mzxid int64, items []A, failing map[int]layout.ItemFailure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.matchesLocked(session, mzxid, items) {
		b.completed, b.failing, b.pending = true, failing, Times{}
	}
}

// Pending returns what an interval report on registration session reg
// writes for the basis: its plan, the record's failing items and the times
// of its newest run that wrote nothing; ok false when there are none.
func (b *Basis[A]) Pending(reg int64) (p Plan[A], failing map[int]layout.ItemFailure, t Times, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.plan.Session == 0 || b.plan.Session != reg || !b.completed || b.pending.Begin == "" {
		return Plan[A]{}, nil, Times{}, false
	}
	return b.plan, b.failing, b.pending, true
}

// Reported records that a report wrote times t: nothing is pending until
// a later run that writes nothing.
func (b *Basis[A]) Reported(t Times) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == t {
		b.pending = Times{}
	}
}

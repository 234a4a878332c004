package protocol

import (
	"maps"
	"slices"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
)

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
//     registration that wrote (quietBasis): other items or epochs, another
//     version of its sharding node, of the flag directory or of the
//     failover directory, queue entries or claim records to consume, a
//     plan not taken from the tree cache, a record without completion or
//     with other failing items; otherwise it sends nothing (0 requests);
//   - its Complete writes the completion when its Begin wrote, or when the
//     run's failing items differ from the record's; otherwise nothing (the
//     counts it was given stay unwritten: CountReport.Written false);
//   - the interval report (ReportCounts, every processCountIntervalSeconds)
//     writes, with the counts, the record of the kept plan with the times
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

// quietBasis is the last Begin of an unmonitored normal run that wrote its
// transaction (on registration session), and what the run record holds
// since (failing, completed). Guarded by the job's mu.
type quietBasis struct {
	session      int64 // 0: none (a monitored or failover Begin since, or never)
	shardVersion int32
	flagVersion  int32
	foVersion    int32
	shardMzxid   int64
	items        []Assignment
	// failing and completed are the stored record's: the failing items it
	// carries, and whether it has a completion.
	failing   map[int]layout.ItemFailure
	completed bool
	// pending: the times of the newest run of the plan that wrote
	// nothing, for the next interval report to write (quietReport); zero:
	// none.
	pending quietTimes
}

// quietTimes are a run's begin, completion and next fire times, as its
// record holds them.
type quietTimes struct{ begin, complete, next string }

// quietBegin reports whether a Begin of plan p on the config snapshot may
// write nothing: an unmonitored normal run planned on the tree cache whose
// plan is the basis's, with nothing to consume and a record that needs no
// rewrite (see the top of this file).
func (b *beginning) quietBegin(p beginPlan, groups int) bool {
	j := b.j
	if b.cfg.MonitorsExecution() || !p.cached || groups > 0 || len(p.items) > 0 && p.items[0].Failover {
		return false
	}
	failing := j.failing.of(itemNumbers(p.items))
	j.mu.Lock()
	defer j.mu.Unlock()
	q := &j.quiet
	return q.session != 0 && q.session == b.sid && q.session == j.regSession &&
		q.shardVersion == p.shardVersion && q.flagVersion == p.flagVersion && q.foVersion == p.fo.Version &&
		q.shardMzxid == p.shardMzxid && slices.Equal(q.items, p.items) &&
		q.completed && maps.Equal(q.failing, failing)
}

// noteBegun records a Begin's transaction, written: an unmonitored normal
// run's plan becomes the basis (its record has no completion yet); any
// other Begin ends the basis (the next unmonitored Begin writes).
func (b *beginning) noteBegun(p beginPlan, failing map[int]layout.ItemFailure) {
	j := b.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if b.cfg.MonitorsExecution() || len(p.items) > 0 && p.items[0].Failover {
		j.quiet = quietBasis{}
		return
	}
	j.quiet = quietBasis{session: b.sid, shardVersion: p.shardVersion, flagVersion: p.flagVersion, foVersion: p.fo.Version,
		shardMzxid: p.shardMzxid, items: slices.Clone(p.items), failing: failing, completed: len(p.items) == 0}
}

// quietComplete reports whether r's Complete (at now, with next) may
// write nothing: its Begin wrote nothing, the record it left is completed,
// and r's failing items are the record's. Its times are then kept for the
// next interval report.
func (r *Run) quietComplete(now string, next time.Time) bool {
	j := r.j
	if !r.quiet {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	q := &j.quiet
	if q.session != r.session || q.shardMzxid != r.shardMzxid || !slices.Equal(q.items, r.items) ||
		!q.completed || !maps.Equal(q.failing, r.failing) {
		return false
	}
	q.pending = quietTimes{begin: r.begin, complete: now}
	if !next.IsZero() {
		q.pending.next = string(layout.FormatTime(next))
	}
	return true
}

// quietReport is what an interval report adds for an unmonitored job
// whose last runs wrote nothing: the record of the kept plan with the
// times of its newest run (rec), fenced (fence) by the versions the plan
// was made at, so that a report racing a Begin that writes a new plan
// cannot put the old one back. None (nil) when there is nothing pending.
func (j *Job) quietReport() (fence, rec []txn.Intent, pending quietTimes) {
	j.mu.Lock()
	defer j.mu.Unlock()
	q := &j.quiet
	if q.session == 0 || q.session != j.regSession || !q.completed || q.pending.begin == "" {
		return nil, nil, quietTimes{}
	}
	r, ok := runRecordOf(q.items, q.pending.begin, q.pending.complete, false, q.shardMzxid)
	if !ok || q.shardVersion < 0 {
		return nil, nil, quietTimes{}
	}
	r.Next, r.Failing = q.pending.next, q.failing
	fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelServer(j.id, layout.NSharding), Version: q.shardVersion})
	if q.flagVersion >= 0 {
		fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelShardingDir, Version: q.flagVersion})
	}
	if q.foVersion >= 0 {
		fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelFailoverQ, Version: q.foVersion})
	}
	rec = []txn.Intent{{Kind: txn.Put, Rel: layout.RelServer(j.id, layout.NRun), Data: layout.EncodeRunRecord(r)}}
	return fence, rec, q.pending
}

// quietReported records that a report wrote pending's times: nothing is
// pending until a later run that writes nothing.
func (j *Job) quietReported(pending quietTimes) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.quiet.pending == pending {
		j.quiet.pending = quietTimes{}
	}
}

// noteCompleted records an unmonitored normal run's completion, written:
// the record of the basis's plan now has a completion and r's failing
// items.
func (r *Run) noteCompleted() {
	j := r.j
	if r.cfg.MonitorsExecution() || len(r.items) == 0 || r.items[0].Failover {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	q := &j.quiet
	if q.session == r.session && q.shardMzxid == r.shardMzxid && slices.Equal(q.items, r.items) {
		q.completed, q.failing, q.pending = true, r.failing, quietTimes{}
	}
}

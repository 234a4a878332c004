package protocol

import (
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/protocol/internal/unmonitored"
)

// The runs of a job with monitorExecution off write nothing while their
// plan stays the last written one (package unmonitored says when and why
// that is safe); these are the Begin's, the Complete's and the interval
// report's questions to the job's Basis (Job.quiet).

// quietPlan is p as the Basis compares it.
func (b *beginning) quietPlan(p beginPlan) unmonitored.Plan[Assignment] {
	return unmonitored.Plan[Assignment]{Session: b.sid, ShardVersion: p.shardVersion, FlagVersion: p.flagVersion,
		FoVersion: p.fo.Version, ShardMzxid: p.shardMzxid, Items: p.items}
}

// quietBegin reports whether a Begin of plan p on the config snapshot may
// write nothing: an unmonitored normal run planned on the tree cache whose
// plan is the basis's, with nothing to consume (groups) and a record that
// needs no rewrite.
func (b *beginning) quietBegin(p beginPlan, groups int) bool {
	j := b.j
	if b.cfg.MonitorsExecution() || !p.cached || groups > 0 || len(p.items) > 0 && p.items[0].Failover {
		return false
	}
	failing := j.failing.Of(itemNumbers(p.items))
	j.mu.Lock()
	reg := j.regSession
	j.mu.Unlock()
	return j.quiet.Same(b.quietPlan(p), reg, failing)
}

// noteBegun records a Begin's transaction, written: an unmonitored normal
// run's plan becomes the basis; any other Begin ends it (the next
// unmonitored Begin writes).
func (b *beginning) noteBegun(p beginPlan, failing map[int]layout.ItemFailure) {
	if b.cfg.MonitorsExecution() || len(p.items) > 0 && p.items[0].Failover {
		b.j.quiet.Reset()
		return
	}
	b.j.quiet.Note(b.quietPlan(p), failing)
}

// quietComplete reports whether r's Complete (at now, with next) may
// write nothing: its Begin wrote nothing, the record it left is completed,
// and r's failing items are the record's. Its times then wait for the
// next interval report.
func (r *Run) quietComplete(now string, next time.Time) bool {
	if !r.quiet {
		return false
	}
	t := unmonitored.Times{Begin: r.begin, Complete: now}
	if !next.IsZero() {
		t.Next = layout.FormatTimeText(next)
	}
	return r.j.quiet.Complete(r.session, r.shardMzxid, r.items, r.failing, t)
}

// noteCompleted records an unmonitored normal run's completion, written.
func (r *Run) noteCompleted() {
	if r.cfg.MonitorsExecution() || len(r.items) == 0 || r.items[0].Failover {
		return
	}
	r.j.quiet.NoteCompleted(r.session, r.shardMzxid, r.items, r.failing)
}

// quietReport is what an interval report of server id adds for an
// unmonitored job whose last runs wrote nothing: the record of plan p with
// the times t of its newest run (rec), fenced (fence) by the versions p was
// made at, so that a report racing a Begin that writes a new plan cannot
// put the old one back. None (nil) when there is no such record.
func quietReport(id string, p unmonitored.Plan[Assignment], failing map[int]layout.ItemFailure, t unmonitored.Times) (fence, rec []txn.Intent) {
	r, ok := runRecordOf(p.Items, t.Begin, t.Complete, false, p.ShardMzxid)
	if !ok || p.ShardVersion < 0 {
		return nil, nil
	}
	r.Next, r.Failing = t.Next, failing
	fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelServer(id, layout.NSharding), Version: p.ShardVersion})
	if p.FlagVersion >= 0 {
		fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelShardingDir, Version: p.FlagVersion})
	}
	if p.FoVersion >= 0 {
		fence = append(fence, txn.Intent{Kind: txn.Check, Rel: layout.RelFailoverQ, Version: p.FoVersion})
	}
	rec = []txn.Intent{{Kind: txn.Put, Rel: layout.RelServer(id, layout.NRun), Data: layout.EncodeRunRecord(r)}}
	return fence, rec
}

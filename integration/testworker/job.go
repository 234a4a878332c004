package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardflow/shardflow/dataflow"
)

// tick is one unit of work: Fetch hands out ticks, Process "commits" them.
type tick int64

// itemRun is the worker's view of one shard item's run on this server.
type itemRun struct {
	gen     uint64
	epoch   int64
	start   time.Time
	fetches int
	ended   bool
}

// tickJob is the dataflow job the worker runs. Each shard item's run starts
// with a "begin" event at its first Fetch; Fetch then returns batches of
// ticks until runFor has elapsed (streaming) or once (non-streaming); every
// Process sleeps processDelay, calls the fencing check (Shard.CheckOwnership)
// and, when it passes, commits the tick to the ledger, which refuses a
// stale epoch atomically at write time. Only an accepted write prints a
// "commit" event; a refusal by either check prints "fenced". An item's run
// ends with an "end" event when its Fetch returns nothing, or from the job
// listener after the run.
//
// Fetch and Process are called concurrently for different items and by
// several workers for one item; all state is under mu.
type tickJob struct {
	em           *emitter
	ledger       *ledger
	runFor       time.Duration
	processDelay time.Duration
	batch        int

	mu     sync.Mutex
	gen    uint64 // incremented at every run start (BeforeRun)
	active map[int]*itemRun
	seq    map[int]int64 // per item commit counter, across runs
	next   tick
}

func newTickJob(em *emitter, l *ledger, runFor, processDelay time.Duration, batch int) *tickJob {
	if batch <= 0 {
		batch = 1
	}
	return &tickJob{
		em:           em,
		ledger:       l,
		runFor:       runFor,
		processDelay: processDelay,
		batch:        batch,
		active:       map[int]*itemRun{},
		seq:          map[int]int64{},
	}
}

// Fetch implements dataflow.Job.
func (j *tickJob) Fetch(ctx context.Context, sh dataflow.Shard) ([]tick, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.active[sh.Item]
	if r == nil || r.gen != j.gen || r.epoch != sh.Epoch || r.ended {
		if r != nil && !r.ended {
			j.endLocked(sh.Item, r, "replaced")
		}
		r = &itemRun{gen: j.gen, epoch: sh.Epoch, start: time.Now()}
		j.active[sh.Item] = r
		j.em.emit(event{Ev: "begin", Item: itemPtr(sh.Item), Epoch: sh.Epoch, Failover: sh.Failover})
	}
	if r.fetches > 0 && time.Since(r.start) >= j.runFor {
		j.endLocked(sh.Item, r, "done")
		return nil, nil
	}
	r.fetches++
	n := min(j.batch, max(sh.FetchCount, 1))
	out := make([]tick, n)
	for i := range out {
		j.next++
		out[i] = j.next
	}
	return out, nil
}

// Process implements dataflow.Job: the fenced commit of one tick, checked
// twice: by the coordination (Shard.CheckOwnership) before the write, and by
// the ledger's epoch at the write itself, which closes the check-then-act
// window a pause between the two can fall into.
func (j *tickJob) Process(ctx context.Context, sh dataflow.Shard, _ tick) error {
	if j.processDelay > 0 {
		t := time.NewTimer(j.processDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	// checked is when the fencing check started: a check that starts after
	// another server began the item with a newer epoch must fail (it syncs
	// first), however long this process is paused afterwards.
	checked := time.Now().UnixMilli()
	if err := sh.CheckOwnership(ctx); err != nil {
		j.em.emit(event{Ev: "fenced", Item: itemPtr(sh.Item), Epoch: sh.Epoch, Reason: "ownership", Err: err.Error()})
		return fmt.Errorf("testworker: commit of item %d epoch %d refused: %w", sh.Item, sh.Epoch, err)
	}
	if err := j.ledger.commit(ctx, sh.Item, sh.Epoch); err != nil {
		if errors.Is(err, errFenced) {
			j.em.emit(event{Ev: "fenced", Item: itemPtr(sh.Item), Epoch: sh.Epoch, Reason: "ledger", Err: err.Error()})
		} else {
			// Unknown outcome (connection lost, cancelled): the ledger
			// itself is the record the suites audit.
			j.em.emit(event{Ev: "error", Item: itemPtr(sh.Item), Epoch: sh.Epoch, Err: err.Error()})
		}
		return err
	}
	j.mu.Lock()
	j.seq[sh.Item]++
	seq := j.seq[sh.Item]
	// Emitted under mu so that a commit is never printed after the "end"
	// of its own item run.
	j.em.emit(event{Ev: "commit", Item: itemPtr(sh.Item), Epoch: sh.Epoch, Seq: seq, Checked: checked})
	j.mu.Unlock()
	return nil
}

// runStarted marks the start of a run: item runs of earlier runs are over.
func (j *tickJob) runStarted() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gen++
}

// runEnded closes the item runs the run left open (cancelled, or a
// non-streaming run whose single Fetch never saw an empty result).
func (j *tickJob) runEnded(reason string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for item, r := range j.active {
		if !r.ended {
			j.endLocked(item, r, reason)
		}
	}
}

func (j *tickJob) endLocked(item int, r *itemRun, reason string) {
	r.ended = true
	j.em.emit(event{Ev: "end", Item: itemPtr(item), Epoch: r.epoch, Reason: reason})
}

// Package counts keeps this server's cumulative counts of a job
// (processSuccessTotal, processFailureTotal) and plans the writes of a
// report of its interval counts.
package counts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/store"
)

// Totals are this server's cumulative counts (processSuccessTotal,
// processFailureTotal), read from the store once (they survive restarts),
// then kept here: only this server writes its own nodes. A report
// (ReportCounts, or a completion's) holds mu (Lock) from its planning (intents)
// until its outcome is known, and sets s and f once its writes are made:
// the stats reporter re-reports counts whose write failed.
type Totals struct {
	st  store.Store
	p   layout.JobPaths
	id  string
	job string
	log *slog.Logger

	mu     sync.Mutex
	s, f   int64
	loaded bool
}

// New returns the totals of server id in job (its paths p), over st.
func New(st store.Store, p layout.JobPaths, id, job string, log *slog.Logger) *Totals {
	return &Totals{st: st, p: p, id: id, job: job, log: log}
}

// Lock takes the report's lock: a report holds it from its planning
// (Intents) until its outcome is known (SetLocked when written).
func (c *Totals) Lock() { c.mu.Lock() }

// Unlock releases the report's lock.
func (c *Totals) Unlock() { c.mu.Unlock() }

// SetLocked records the totals of a report whose writes are made; the
// caller holds the lock.
func (c *Totals) SetLocked(success, failure int64) { c.s, c.f = success, failure }

// Intents are the writes of a report of the interval's counts and the
// totals they make (loaded from the store the first time). The caller
// holds the lock.
func (c *Totals) Intents(ctx context.Context, success, failure int64) ([]txn.Intent, int64, int64, error) {
	if !c.loaded {
		s, err := c.read(ctx, layout.NSuccessTotal)
		if err != nil {
			return nil, 0, 0, err
		}
		f, err := c.read(ctx, layout.NFailureTotal)
		if err != nil {
			return nil, 0, 0, err
		}
		c.s, c.f, c.loaded = s, f, true
	}
	ts, tf := c.s+success, c.f+failure
	ins := []txn.Intent{
		{Kind: txn.Put, Rel: layout.RelServer(c.id, layout.NSuccess), Data: []byte(strconv.FormatInt(success, 10))},
		{Kind: txn.Put, Rel: layout.RelServer(c.id, layout.NFailure), Data: []byte(strconv.FormatInt(failure, 10))},
		{Kind: txn.Put, Rel: layout.RelServer(c.id, layout.NSuccessTotal), Data: []byte(strconv.FormatInt(ts, 10))},
		{Kind: txn.Put, Rel: layout.RelServer(c.id, layout.NFailureTotal), Data: []byte(strconv.FormatInt(tf, 10))},
	}
	return ins, ts, tf, nil
}

// Known are totals a join found (Listed), before any report of this
// server's: the first report then reads nothing.
type Known struct{ Success, Failure int64 }

// Listed reads the totals a listing of this server's node (its children,
// kids; nil: no such node) shows: a total not listed is 0, with no read
// (a server new to the job has none), the others are read side by side. A
// join calls it beside its other reads, so that the first completion
// after a start does not read them on the run's path. Only this server
// writes them, and the join reads them only while no session of this
// server id holds its status node (no incarnation of it reports any
// more).
func (c *Totals) Listed(ctx context.Context, kids []string) (Known, error) {
	var k Known
	var errS, errF error
	var wg sync.WaitGroup
	if slices.Contains(kids, layout.NSuccessTotal) {
		wg.Go(func() { k.Success, errS = c.read(ctx, layout.NSuccessTotal) })
	}
	if slices.Contains(kids, layout.NFailureTotal) {
		wg.Go(func() { k.Failure, errF = c.read(ctx, layout.NFailureTotal) })
	}
	wg.Wait()
	return k, errors.Join(errS, errF)
}

// Seed takes totals a join found (Listed) as loaded, unless a report
// loaded them already.
func (c *Totals) Seed(k Known) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		c.s, c.f, c.loaded = k.Success, k.Failure, true
	}
}

// read reads one of this server's count nodes directly; absent is 0.
func (c *Totals) read(ctx context.Context, node string) (int64, error) {
	d, _, err := c.st.Get(ctx, c.p.Server(c.id, node))
	if errors.Is(err, store.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("coord: job %q: read %s: %w", c.job, c.p.Server(c.id, node), err)
	}
	n, perr := layout.ParseCount(d)
	if perr != nil {
		c.log.Warn("malformed count node; counting again from 0", "node", c.p.Server(c.id, node), "err", perr)
		return 0, nil
	}
	return n, nil
}

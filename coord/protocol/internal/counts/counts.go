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
	// unwritten: the server node is marked as holding count nodes no
	// report wrote (layout.CountsUnwritten); the reports end the mark, in
	// their transactions, until one is written.
	unwritten bool
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
func (c *Totals) SetLocked(success, failure int64) {
	c.s, c.f, c.unwritten = success, failure, false
}

// Intents are the writes of a report of the interval's counts and the
// totals they make (loaded from the store the first time), with the end
// of the server node's mark while it stands. The caller holds the lock.
func (c *Totals) Intents(ctx context.Context, success, failure int64) ([]txn.Intent, int64, int64, error) {
	if !c.loaded {
		s, _, err := c.read(ctx, layout.NSuccessTotal)
		if err != nil {
			return nil, 0, 0, err
		}
		f, _, err := c.read(ctx, layout.NFailureTotal)
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
	if c.unwritten {
		// Any set of the node ends the mark (its Mzxid passes its
		// Czxid), even one made again after an outcome left unknown.
		ins = append(ins, txn.Intent{Kind: txn.Set, Rel: layout.RelServer(c.id)})
	}
	return ins, ts, tf, nil
}

// Known are totals a join found (Listed), before any report of this
// server's: the first report then reads nothing.
type Known struct{ Success, Failure int64 }

// Joined is what a join found of this server's counts (Listed).
type Joined struct {
	// Totals are its totals; nil: unknown, the first report reads them.
	Totals *Known
	// Unwritten: its node is marked as holding count nodes no report
	// wrote (layout.CountsUnwritten); its reports end the mark.
	Unwritten bool
	// Ops go in the join's transaction: the checks that totals taken
	// from the mark, unread, are still unwritten (Checked), or the end of
	// a mark that stands over totals written since (by a writer that
	// does not keep it: an older release's, after a downgrade).
	Ops     []store.Op
	Checked bool
}

// Listed is what a join's listing of this server's node (its children
// kids and Stat st) says of its counts, so that the first completion
// after a start reads nothing on the run's path. With a status node
// listed (another session's, which may report still) only the mark: its
// totals are read by the first report. Else the totals (only this server
// writes them, and no incarnation of it reports any more): 0 for a total
// not listed, and for both while the mark stands (1,000 idle jobs
// restarted: no read; the transaction checks them) unless readMarked (a
// transaction that checked them failed); the others are read side by
// side.
func (c *Totals) Listed(ctx context.Context, kids []string, st store.Stat, readMarked bool) (Joined, error) {
	j := Joined{Unwritten: layout.CountsUnwritten(st)}
	if slices.Contains(kids, layout.NStatus) {
		return j, nil
	}
	if j.Unwritten && !readMarked {
		j.Totals, j.Checked = &Known{}, true
		for _, n := range []string{layout.NSuccessTotal, layout.NFailureTotal} {
			if slices.Contains(kids, n) {
				j.Ops = append(j.Ops, &store.CheckOp{Path: c.p.Server(c.id, n), Version: 0})
			}
		}
		return j, nil
	}
	var k Known
	var errS, errF error
	var vs, vf int32
	var wg sync.WaitGroup
	if slices.Contains(kids, layout.NSuccessTotal) {
		wg.Go(func() { k.Success, vs, errS = c.read(ctx, layout.NSuccessTotal) })
	}
	if slices.Contains(kids, layout.NFailureTotal) {
		wg.Go(func() { k.Failure, vf, errF = c.read(ctx, layout.NFailureTotal) })
	}
	wg.Wait()
	j.Totals = &k
	if j.Unwritten && (vs > 0 || vf > 0) { // written since their creation
		j.Unwritten, j.Ops = false, []store.Op{&store.SetOp{Path: c.p.Server(c.id), Version: store.AnyVersion}}
	}
	return j, errors.Join(errS, errF)
}

// Seed takes what a join found (Listed, or the mark): the totals as
// loaded, and the mark to end, unless a report loaded them already.
func (c *Totals) Seed(j Joined) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		return
	}
	c.unwritten = j.Unwritten
	if j.Totals != nil {
		c.s, c.f, c.loaded = j.Totals.Success, j.Totals.Failure, true
	}
}

// read reads one of this server's count nodes directly, with its data
// version; absent is 0.
func (c *Totals) read(ctx context.Context, node string) (int64, int32, error) {
	d, st, err := c.st.Get(ctx, c.p.Server(c.id, node))
	if errors.Is(err, store.ErrNoNode) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("coord: job %q: read %s: %w", c.job, c.p.Server(c.id, node), err)
	}
	n, perr := layout.ParseCount(d)
	if perr != nil {
		c.log.Warn("malformed count node; counting again from 0", "node", c.p.Server(c.id, node), "err", perr)
		return 0, st.Version, nil
	}
	return n, st.Version, nil
}

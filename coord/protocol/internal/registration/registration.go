// Package registration writes this server's registration in a job:
// servers/{id} with its host name, flags and ephemeral status node (the
// one spelling of it, for the join's transactions and a re-registration
// alike), the run record that states this server's layout, the guard
// that refuses a Begin beside a server of an older layout, and the
// registration's end, going offline (offline.go).
package registration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// ErrServerIDInUse: another live process registered the same server id
// for this job. Give each process its own ServerID (e.g. the pod name).
var ErrServerIDInUse = errors.New("coord: server id already registered by a live process for this job; give each process its own server id")

// Config is what a Registration is built on: the job's handles and this
// server's settings.
type Config struct {
	Store  store.Store
	Paths  layout.JobPaths
	Job    string // the job's name
	Server string // this server's id
	Log    *slog.Logger
	Cache  *treecache.Cache
	// HostName is written to servers/{id}/hostName.
	HostName string
	// IDWait bounds the wait for a status node another session holds
	// (RegistryConfig.ServerIDWait; 0: the session timeout, negative: no
	// wait); IDSetting names the server id's setting in errors.
	IDWait    time.Duration
	IDSetting string
	// Mu is the job's mutex: it guards layoutOK.
	Mu *sync.Mutex
	// RecordLastError writes this server's lastError (the guard's refusal).
	RecordLastError func(ctx context.Context, msg string)
	// Elec is the job's election, which going offline resigns from;
	// NotLeader records that this server leads no more (under the job's
	// mu).
	Elec      *recipe.Election
	NotLeader func()
}

// Registration is this server's registration in one job. Safe for
// concurrent use; LocalDisabled is set by the join before any other use.
type Registration struct {
	st              store.Store
	p               layout.JobPaths
	jname           string
	id              string
	log             *slog.Logger
	cache           *treecache.Cache
	hostName        string
	idWait          time.Duration
	idSetting       string
	RecordLastError func(ctx context.Context, msg string)
	elec            *recipe.Election
	NotLeader       func()

	// LocalDisabled is the joining config's Disabled, applied only to a
	// server node that has never been written.
	LocalDisabled bool

	mu *sync.Mutex
	// layoutOK is the live server set the layout guard last passed
	// (LayoutGuard).
	layoutOK []string
}

// New returns the registration c describes.
func New(c Config) *Registration {
	return &Registration{
		st: c.Store, p: c.Paths, jname: c.Job, id: c.Server, log: c.Log, cache: c.Cache,
		hostName: c.HostName, idWait: c.IDWait, idSetting: c.IDSetting, RecordLastError: c.RecordLastError, mu: c.Mu,
		elec: c.Elec, NotLeader: c.NotLeader,
	}
}

// RegisteredAt is the zxid a stored job's registration committed at: the
// Mzxid its transaction's bump of the membership version returned (ops and
// their results); 0 when it has none.
func (g *Registration) RegisteredAt(ops []store.Op, results []store.OpResult) int64 {
	for i, op := range ops {
		if set, ok := op.(*store.SetOp); ok && set.Path == g.p.Abs(layout.NServers) && i < len(results) {
			return results[i].Stat.Mzxid
		}
	}
	return 0
}

// ReshardedSince reports whether a reshard wrote this server's sharding
// node after the transaction at zxid at (its registration): that reshard
// listed the servers after it (a Multi planned on an earlier listing fails
// on the membership version the registration bumped), so it gave this
// server its items, and raising the flag again would only make another
// reshard of the same membership. Joiners racing (a join's later attempts
// leave the flag to after their transaction) often find the leader has
// resharded for them already. From the cache when it shows a write after
// at, else one read; false when it cannot tell.
func (g *Registration) ReshardedSince(ctx context.Context, at int64) bool {
	if at <= 0 {
		return false
	}
	if _, st, ok := g.cache.Get(layout.RelServer(g.id, layout.NSharding)); ok && st.Mzxid > at {
		return true
	}
	ok, st, err := g.st.Exists(ctx, g.p.Server(g.id, layout.NSharding))
	return err == nil && ok && st.Mzxid > at
}

// LayoutGuard refuses a Begin while an online server of the job runs an
// older layout (its record is absent or has no "layout":2; every server of
// this layout writes one when it registers): servers of the two layouts
// would not see each other's runs, and items would run twice. The upgrade
// stops every server of a job first (docs/operations.md). The records
// read are those of the online servers the guard has not passed yet (none
// per trigger, none when a server only left), side by side; the watcher
// reads them ahead when the servers change (LayoutGuardAhead), so that the
// first Begin after a start or a join does not wait for them.
func (g *Registration) LayoutGuard(ctx context.Context) error {
	return g.layoutGuard(ctx, true)
}

// LayoutGuardAhead is LayoutGuard off any run's path (the watcher's, at
// each reaction): it passes the online servers whose records say layout
// 2, so that the next Begin reads none (10,000 jobs on 3 servers: their
// first Begins read the two others' records one after the other, 1-1.6 s
// each; issue 31). A refusal is left to that Begin, which reads again and
// reports it. Not while a reshard is due (the flag or processing in the
// cache): the servers change, and the Begin waits for it anyway.
func (g *Registration) LayoutGuardAhead(ctx context.Context) {
	if !g.cache.Has(layout.RelNecessary) && !g.cache.Has(layout.RelProcessing) {
		_ = g.layoutGuard(ctx, false)
	}
}

// layoutGuard is LayoutGuard; report: a refusal is recorded in lastError.
func (g *Registration) layoutGuard(ctx context.Context, report bool) error {
	servers := g.cache.Children(layout.NServers)
	g.mu.Lock()
	passed := g.layoutOK
	g.mu.Unlock()
	// The common case, per trigger: the online servers are those the guard
	// last passed, compared in place (no list built).
	i, same := 0, true
	for _, s := range servers {
		if !g.cache.Has(layout.RelServer(s, layout.NStatus)) {
			continue
		}
		if i >= len(passed) || passed[i] != s {
			same = false
			break
		}
		i++
	}
	if same && i == len(passed) {
		return nil
	}
	var online, unread []string
	for _, s := range servers {
		if g.cache.Has(layout.RelServer(s, layout.NStatus)) {
			online = append(online, s)
			if s != g.id && !slices.Contains(passed, s) {
				unread = append(unread, s)
			}
		}
	}
	type read struct {
		data []byte
		err  error
	}
	recs := make([]read, len(unread))
	var wg sync.WaitGroup
	for k, s := range unread {
		wg.Go(func() { recs[k].data, _, recs[k].err = g.st.Get(ctx, g.p.Server(s, layout.NRun)) })
	}
	wg.Wait()
	for k, s := range unread {
		data, err := recs[k].data, recs[k].err
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: job %q: read %s: %w", g.jname, g.p.Server(s, layout.NRun), err)
		}
		var rec layout.RunRecord
		if err == nil {
			rec, _ = layout.DecodeRunRecord(data)
		}
		if err != nil || rec.Layout < layout.RecordLayout {
			if gone, _, xerr := g.st.Exists(ctx, g.p.Server(s, layout.NStatus)); xerr == nil && !gone {
				online = slices.DeleteFunc(online, func(o string) bool { return o == s })
				continue // went offline meanwhile
			}
			e := fmt.Errorf("%w: job %q: server %q runs an older release (its %s has no \"layout\":%d): stop every server of the job before upgrading (docs/operations.md)",
				layout.ErrBadConfig, g.jname, s, g.p.Server(s, layout.NRun), layout.RecordLayout)
			if report {
				g.RecordLastError(ctx, e.Error())
			}
			return e
		}
	}
	g.mu.Lock()
	g.layoutOK = online
	g.mu.Unlock()
	return nil
}

// RunRead is a read of servers/{id}/run made beside a join's other reads,
// so that the registration's layout write (LayoutOps) costs no round trip
// of its own.
type RunRead struct {
	Found   bool
	Data    []byte
	Version int32
}

// RegisterServer writes servers/{id} for session sid: hostName, status
// READY (ephemeral), disabled only when it was never written (an operator's
// disable or enable survives restarts); a first join clears shutdown. The
// transaction bumps the membership version (touchMembership); an operator
// writing this server's flags at the same time makes it re-plan.
func (g *Registration) RegisterServer(ctx context.Context, sid int64, first bool) error {
	statusPath := g.p.Server(g.id, layout.NStatus)
	err := layout.MultiRetry(ctx, g.st, func(ctx context.Context, attempt int) ([]store.Op, error) {
		// The two reads side by side (one round trip).
		var (
			kids      []string
			kerr      error
			noDir     bool
			readsDone = make(chan struct{})
		)
		go func() {
			defer close(readsDone)
			kids, _, kerr = g.st.Children(ctx, g.p.Server(g.id))
		}()
		ok, stat, err := g.st.Exists(ctx, statusPath)
		<-readsDone
		if err != nil {
			return nil, fmt.Errorf("coord: job %q: read %s: %w", g.jname, statusPath, err)
		}
		if errors.Is(kerr, store.ErrNoNode) {
			noDir, kerr = true, nil
		}
		if kerr != nil {
			return nil, fmt.Errorf("coord: job %q: read %s: %w", g.jname, g.p.Server(g.id), kerr)
		}
		if ok && stat.EphemeralOwner != sid && first && attempt == 0 {
			ok, stat, err = g.AwaitStatusGone(ctx, statusPath, sid)
			if err != nil {
				return nil, err
			}
		}
		if ok && stat.EphemeralOwner != sid {
			return nil, fmt.Errorf("%w: %s belongs to live session 0x%x; set a distinct %s", ErrServerIDInUse, statusPath, stat.EphemeralOwner, g.idSetting)
		}
		ops := g.Ops(ServerNode{Exists: !noDir, Kids: kids, StatusHeld: ok}, g.LocalDisabled, first)
		lops, err := g.LayoutOps(ctx, kids, nil)
		if err != nil {
			return nil, err
		}
		return append(append(ops, lops...), layout.TouchMembership(g.p)), nil
	})
	if err != nil && !errors.Is(err, ErrServerIDInUse) {
		return fmt.Errorf("coord: job %q: register %s: %w", g.jname, g.p.Server(g.id), err)
	}
	return err
}

// ServerNode is what a registration read of servers/{id}: whether the
// node exists, its children, and whether its status node is held by this
// session already.
type ServerNode struct {
	Exists     bool
	Kids       []string
	StatusHeld bool
}

// Ops register this server in one transaction: servers/{id}
// (created if absent), its hostName, its disabled flag only when it was
// never written (an operator's disable or enable survives restarts;
// disabled is the joining config's), the removal of an operator's shutdown
// when clearShutdown (a first join), and the status node READY
// (ephemeral, this session's) unless this session holds it. The join's
// transactions and registerServer all register through it; the caller
// adds the run record's layout write (LayoutOps) and the membership bump
// (layout.TouchMembership).
func (g *Registration) Ops(node ServerNode, disabled, clearShutdown bool) []store.Op {
	var ops []store.Op
	if !node.Exists {
		ops = append(ops, &store.CreateOp{Path: g.p.Server(g.id)})
	}
	has := func(name string) bool { return slices.Contains(node.Kids, name) }
	ops = append(ops, layout.PutOp(g.p.Server(g.id, layout.NHostName), []byte(g.hostName), has(layout.NHostName)))
	if !has(layout.NDisabled) {
		ops = append(ops, &store.CreateOp{Path: g.p.Server(g.id, layout.NDisabled), Data: layout.FlagData(disabled)})
	}
	if clearShutdown && has(layout.NShutdown) {
		ops = append(ops, &store.DeleteOp{Path: g.p.Server(g.id, layout.NShutdown), Version: store.AnyVersion})
	}
	if !node.StatusHeld {
		ops = append(ops, &store.CreateOp{Path: g.p.Server(g.id, layout.NStatus), Data: []byte(layout.StatusReady), Mode: store.Ephemeral})
	}
	return ops
}

// WithCounts is ops (a join's, which creates this server's node) with
// this server's count nodes created at 0, when they fit the request (the
// first report creates those that are missing), and the server node
// marked as holding them unwritten (its data set in the same transaction:
// layout.CountsUnwritten); marked says they are. The first run's
// completion then sets them, where its creates changed servers/{id}'s
// children and every server's tree cache listed them again (a listing per
// server of the job for each of its servers, queued behind the first
// fire's writes of 10,000 jobs; issue 31); the registration changes them
// anyway. The mark spares a restarted server's join and a status read
// the reads of counts nobody wrote (1,000 idle jobs restarted: 2 reads
// each; status: 4 per server).
func (g *Registration) WithCounts(ops []store.Op) (out []store.Op, marked bool) {
	counts := make([]store.Op, 0, len(layout.CountNodes)+1)
	for _, n := range layout.CountNodes {
		counts = append(counts, &store.CreateOp{Path: g.p.Server(g.id, n), Data: []byte("0")})
	}
	counts = append(counts, &store.SetOp{Path: g.p.Server(g.id), Version: 0})
	if store.MultiSize(ops)+store.MultiSize(counts) > store.RequestLimit(g.st) {
		return ops, false
	}
	return append(ops, counts...), true
}

// FreshRunRecordOp creates this server's run record of this layout
// (LayoutOps), empty.
func (g *Registration) FreshRunRecordOp() store.Op {
	return &store.CreateOp{Path: g.p.Server(g.id, layout.NRun), Data: layout.EncodeRunRecord(layout.RunRecord{Layout: layout.RecordLayout})}
}

// AwaitStatusGone waits, up to the store's session timeout, for a status
// node held by another session to go: after a crash and a quick restart
// under the same server id, the previous incarnation's session is dying but
// not yet expired. A live duplicate keeps it past the timeout; the caller
// then refuses with ErrServerIDInUse. It returns the node's last state.
func (g *Registration) AwaitStatusGone(ctx context.Context, statusPath string, sid int64) (bool, store.Stat, error) {
	wait := g.idWait
	if wait == 0 {
		sess, _ := g.st.Session()
		wait = sess.Timeout
	}
	if wait <= 0 {
		ok, stat, err := g.st.Exists(ctx, statusPath)
		if err != nil {
			return false, store.Stat{}, fmt.Errorf("coord: job %q: read %s: %w", g.jname, statusPath, err)
		}
		return ok, stat, nil
	}
	g.log.Info("this server id's status node is held by another session, probably this server's previous incarnation; waiting for it to expire",
		"node", statusPath, "up-to", wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ok, stat, ch, err := g.st.ExistsW(ctx, statusPath)
		if err != nil {
			return false, store.Stat{}, fmt.Errorf("coord: job %q: read %s: %w", g.jname, statusPath, err)
		}
		if !ok || stat.EphemeralOwner == sid {
			return ok, stat, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return ok, stat, nil
		case <-ctx.Done():
			return false, store.Stat{}, fmt.Errorf("coord: job %q: waiting for %s (session 0x%x) to expire: %w: %w", g.jname, statusPath, stat.EphemeralOwner, ErrServerIDInUse, ctx.Err())
		}
	}
}

// LayoutOps are the registration's writes of the run record that says this
// server's layout (LayoutGuard): created when absent (kids: the server
// node's children), rewritten over a record of an older release (read only
// then). pre, when not nil, is the record as read beside the join's other
// reads (readForJoin), used instead of a read of its own; a record changed
// since fails the transaction's create or version check, and the join
// plans again on fresh reads.
func (g *Registration) LayoutOps(ctx context.Context, kids []string, pre *RunRead) ([]store.Op, error) {
	if pre == nil && !slices.Contains(kids, layout.NRun) || pre != nil && !pre.Found {
		return []store.Op{g.FreshRunRecordOp()}, nil
	}
	var rd RunRead
	if pre != nil {
		rd = *pre
	} else {
		d, rst, err := g.st.Get(ctx, g.p.Server(g.id, layout.NRun))
		if errors.Is(err, store.ErrNoNode) {
			return []store.Op{g.FreshRunRecordOp()}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("coord: job %q: read %s: %w", g.jname, g.p.Server(g.id, layout.NRun), err)
		}
		rd = RunRead{Found: true, Data: d, Version: rst.Version}
	}
	if rec, derr := layout.DecodeRunRecord(rd.Data); derr != nil || rec.Layout < layout.RecordLayout {
		return []store.Op{&store.SetOp{Path: g.p.Server(g.id, layout.NRun), Data: layout.EncodeRunRecord(layout.RunRecord{Layout: layout.RecordLayout}), Version: rd.Version}}, nil
	}
	return nil, nil
}

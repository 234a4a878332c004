package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// status reads a job's status. Items are 0..shardingTotalCount-1 of the
// stored config (plus any item beyond it still running); the next fire time
// is derived from the stored cron at the time of the read, so it is never
// stale and disappears with the cron.
func (a *admin) status(ctx context.Context, job string) (JobStatus, error) {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return JobStatus{}, err
	}
	st := JobStatus{Job: job, Servers: []ServerStatus{}, Items: []ItemStatus{}, FailoverQueue: []int{}, Actions: []Action{}}
	if st.Config, err = a.readFields(ctx, p); err != nil {
		return st, err
	}
	cfg, cerr := layout.DecodeStoredConfig(p, job, st.Config)
	if cerr != nil {
		st.ConfigError = cerr.Error()
	}
	st.NextFireTime = nextFire(cfg, cerr, time.Now())
	if st.Leader, _, err = a.getOpt(ctx, p.Abs(layout.RelHost)); err != nil {
		return st, err
	}
	if st.ReshardingPending, _, err = a.st.Exists(ctx, p.Abs(layout.RelNecessary)); err != nil {
		return st, fmt.Errorf("coord: read %s: %w", p.Abs(layout.RelNecessary), err)
	}
	names, err := a.servers(ctx, p, job, "")
	if err != nil {
		return st, err
	}
	var recs []storedRecord
	for _, s := range names {
		ss, rec, err := a.serverStatus(ctx, p, s)
		if err != nil {
			return st, err
		}
		st.Servers = append(st.Servers, ss)
		if rec != nil {
			recs = append(recs, *rec)
		}
	}
	if st.Items, err = a.itemStatuses(ctx, p, cfg, cerr == nil, st.NextFireTime, recs); err != nil {
		return st, err
	}
	q, _, err := a.st.Children(ctx, p.Abs(layout.RelFailoverQ))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return st, fmt.Errorf("coord: read %s: %w", p.Abs(layout.RelFailoverQ), err)
	}
	listing := layout.ParseFailoverDir(q)
	for it := range listing.Queued {
		st.FailoverQueue = append(st.FailoverQueue, it)
	}
	slices.Sort(st.FailoverQueue)
	if err := a.lostClaims(ctx, p, st.Items, listing.Claims); err != nil {
		return st, err
	}
	if st.Actions, err = a.audit(ctx, p, job); err != nil {
		return st, err
	}
	if st.Refused, err = a.refused(ctx, p); err != nil {
		return st, err
	}
	st.Health, st.HealthReasons = health(st)
	return st, nil
}

// nextFire is the cron's next fire time after now; nil without a cron or a
// valid config.
func nextFire(cfg jobconfig.Config, cerr error, now time.Time) *time.Time {
	if cerr != nil || strings.TrimSpace(cfg.Cron) == "" {
		return nil
	}
	sched, err := jobconfig.ParseCron(cfg.CronSpec()) // in the job's timeZone
	if err != nil {
		return nil
	}
	t := sched.Next(now)
	if t.IsZero() {
		return nil
	}
	return &t
}

// storedRecord is a server's run record as a status read found it, with
// the Mzxid of its node.
type storedRecord struct {
	rec    layout.RunRecord
	server string
	mzxid  int64
	// live: the server's live marker exists (its monitored run is going).
	live bool
}

// serverStatus reads server s's nodes, and its run record (nil: none, or
// malformed, which only costs the per-item reads it would have saved).
func (a *admin) serverStatus(ctx context.Context, p layout.JobPaths, s string) (ServerStatus, *storedRecord, error) {
	ss := ServerStatus{ID: s, Status: layout.StatusOffline, Sharding: []int{}}
	var rec *storedRecord
	kids, _, err := a.st.Children(ctx, p.Server(s))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return ss, nil, fmt.Errorf("coord: read %s: %w", p.Server(s), err)
	}
	for _, k := range kids {
		if k == layout.NRun {
			d, nst, err := a.st.Get(ctx, p.Server(s, k))
			if err != nil && !errors.Is(err, store.ErrNoNode) {
				return ss, nil, fmt.Errorf("coord: read %s: %w", p.Server(s, k), err)
			}
			if err == nil {
				if r, derr := layout.DecodeRunRecord(d); derr == nil {
					rec = &storedRecord{rec: r, server: s, mzxid: nst.Mzxid}
					if nst.NumChildren > 0 {
						if rec.live, _, err = a.st.Exists(ctx, p.Server(s, layout.NRun, layout.NLive)); err != nil {
							return ss, nil, fmt.Errorf("coord: read %s: %w", p.Server(s, layout.NRun, layout.NLive), err)
						}
					}
				}
			}
			continue
		}
		d, stat, err := a.st.Get(ctx, p.Server(s, k))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return ss, nil, fmt.Errorf("coord: read %s: %w", p.Server(s, k), err)
		}
		v := string(d)
		switch k {
		case layout.NHostName:
			ss.HostName = v
		case layout.NStatus:
			ss.Status = v
		case layout.NSharding:
			items, perr := layout.ParseItems([]byte(v))
			if perr != nil && ss.LastError == "" {
				ss.LastError = fmt.Sprintf("%s: %v", p.Server(s, k), perr)
			}
			if items != nil {
				ss.Sharding = items
			}
		case layout.NSuccessTotal:
			ss.TotalSuccessCount, _ = layout.ParseCount([]byte(v))
			asOf := stat.Mtime
			ss.CountsAsOf = &asOf
		case layout.NSuccess:
			ss.ProcessSuccessCount, _ = layout.ParseCount([]byte(v))
		case layout.NFailure:
			ss.ProcessFailureCount, _ = layout.ParseCount([]byte(v))
		case layout.NFailureTotal:
			ss.TotalFailureCount, _ = layout.ParseCount([]byte(v))
		case layout.NDisabled:
			ss.Disabled = layout.FlagTrue([]byte(v))
		case layout.NPaused:
			ss.Paused = layout.FlagTrue([]byte(v))
		case layout.NShutdown:
			ss.Shutdown = layout.FlagTrue([]byte(v))
		case layout.NLastError:
			if v != "" {
				ss.LastError = v
			}
		}
	}
	return ss, rec, nil
}

// itemStatuses lists the job's items. With a valid config they are
// 0..total-1 plus items beyond the total that still run (a lowered total;
// the leader prunes them at its next reshard); without one, every item in
// the execution tree.
func (a *admin) itemStatuses(ctx context.Context, p layout.JobPaths, cfg jobconfig.Config, valid bool, next *time.Time, recs []storedRecord) ([]ItemStatus, error) {
	execNames, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	present := map[int]bool{} // item -> has an execution node
	for _, n := range execNames {
		if it, ok := layout.ParseItemName(n); ok {
			present[it] = true
		}
	}
	shown := map[int]bool{}
	for it := range present {
		shown[it] = true
	}
	if valid {
		shown = map[int]bool{}
		for it := range cfg.ShardingTotalCount {
			shown[it] = true
		}
	}
	for it := range present {
		if !shown[it] {
			if running, _, err := a.st.Exists(ctx, p.Item(it, layout.NRunning)); err != nil {
				return nil, fmt.Errorf("coord: read %s: %w", p.Item(it, layout.NRunning), err)
			} else if running {
				shown[it] = true
			}
		}
	}
	for _, r := range recs {
		if r.live && r.rec.Complete == "" && r.rec.Monitor && (!valid || cfg.MonitorsExecution()) {
			for _, it := range r.rec.Items {
				shown[it] = true
			}
		}
	}
	items := slices.Sorted(maps.Keys(shown))
	out := make([]ItemStatus, len(items))
	for i, it := range items {
		out[i] = ItemStatus{Item: it}
	}
	// Readers consult the live markers only while the config monitors
	// execution (with it off a run is running for nobody).
	monitor := !valid || cfg.MonitorsExecution()
	if err := a.readItems(ctx, p, out, present, recs, monitor); err != nil {
		return nil, err
	}
	for i := range out {
		if !out[i].Disabled && next != nil {
			t := *next
			out[i].NextFireTime = &t
		}
	}
	return out, nil
}

// readItems fills out from the servers' run records and, for the items
// that have a container (execution/{item}: failover runs, misfire and
// disabled flags, rare), from its children, in two pipelined waves: every
// such item's children listing, then the values those listings named
// (failover owner, a failover run's begin and complete times, with their
// Stat). Each wave keeps layout.ItemReaders requests in flight. An item's begin
// and complete times are its newest run's: the newest record naming it
// (by the record's Mzxid), unless a failover run began it since (its
// lastBeginTime's Mzxid above the record's).
func (a *admin) readItems(ctx context.Context, p layout.JobPaths, out []ItemStatus, present map[int]bool, recs []storedRecord, monitor bool) error {
	type get struct {
		is   *ItemStatus
		name string
	}
	// newest: per item, the newest run record naming it.
	newest := map[int]*storedRecord{}
	for i := range recs {
		for _, it := range recs[i].rec.Items {
			if r := newest[it]; r == nil || r.mzxid < recs[i].mzxid {
				newest[it] = &recs[i]
			}
		}
	}
	kids := make([][]string, len(out))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i := range out {
		if !present[out[i].Item] {
			continue
		}
		g.Go(func() error {
			ks, _, err := a.st.Children(gctx, p.Item(out[i].Item))
			if err != nil && !errors.Is(err, store.ErrNoNode) {
				return fmt.Errorf("coord: read %s: %w", p.Item(out[i].Item), err)
			}
			kids[i] = ks
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var gets []get
	running := make([]bool, len(out))
	for i := range out {
		is := &out[i]
		for _, k := range kids[i] {
			switch k {
			case layout.NRunning:
				running[i] = true
			case layout.NMisfire:
				is.Misfire = true
			case layout.NDisabled:
				is.Disabled = true
			case layout.NLastBeginTime, layout.NLastCompleteTime, layout.NFailover:
				gets = append(gets, get{is, k})
			}
		}
	}
	vals := make([]string, len(gets))
	stats := make([]store.Stat, len(gets))
	found := make([]bool, len(gets))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i, r := range gets {
		g.Go(func() error {
			d, st, err := a.st.Get(gctx, p.Item(r.is.Item, r.name))
			if errors.Is(err, store.ErrNoNode) {
				return nil // deleted between the listing and the read
			}
			if err != nil {
				return fmt.Errorf("coord: read %s: %w", p.Item(r.is.Item, r.name), err)
			}
			vals[i], stats[i], found[i] = string(d), st, true
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// A failover run's times, per item: value and Mzxid.
	type stamp struct {
		t     *time.Time
		mzxid int64
	}
	fbegin, fcomplete := map[*ItemStatus]stamp{}, map[*ItemStatus]stamp{}
	for i, r := range gets {
		if !found[i] {
			continue
		}
		if r.name == layout.NFailover {
			r.is.Failover = vals[i]
			continue
		}
		t, terr := layout.ParseTime([]byte(vals[i]))
		if terr != nil {
			continue
		}
		if r.name == layout.NLastBeginTime {
			fbegin[r.is] = stamp{&t, stats[i].Mzxid}
		} else {
			fcomplete[r.is] = stamp{&t, stats[i].Mzxid}
		}
	}
	for i := range out {
		is := &out[i]
		rec := newest[is.Item]
		fb, hasF := fbegin[is]
		if hasF && (rec == nil || fb.mzxid > rec.mzxid) {
			// A failover run is the item's newest.
			is.LastBeginTime = fb.t
			fc, done := fcomplete[is]
			if done && fc.mzxid > fb.mzxid {
				is.LastCompleteTime = fc.t
			}
			is.Running = running[i] && monitor
			is.Completed = !is.Running && done && fc.mzxid > fb.mzxid
			continue
		}
		if rec == nil || recordTime(rec.rec.Begin) == nil {
			continue
		}
		is.LastBeginTime = recordTime(rec.rec.Begin)
		if f, ok := rec.rec.Failing[is.Item]; ok {
			is.ConsecutiveFailures, is.FailingSince, is.LastError, is.FailingOn = f.Runs, recordTime(f.Since), f.Error, rec.server
		}
		if rec.rec.Complete != "" {
			is.LastCompleteTime = recordTime(rec.rec.Complete)
			is.Completed = rec.rec.Monitor
		} else if fc, ok := fcomplete[is]; ok && hasF && fc.mzxid > fb.mzxid {
			// The record's run has not completed; the item's last
			// completion is an earlier failover run's.
			is.LastCompleteTime = fc.t
		}
		is.Running = monitor && (rec.live && rec.rec.Complete == "" && rec.rec.Monitor || running[i])
	}
	return nil
}

// recordTime decodes a time of a run record; nil when malformed.
func recordTime(s string) *time.Time {
	t, err := layout.ParseTime([]byte(s))
	if err != nil {
		return nil
	}
	return &t
}

// lostClaims sets FailoverLost on the items whose claim record
// (claimrecord.go) outlived its claim: the claimant's session ended with
// it. One read per record (records exist only while failover runs go on).
func (a *admin) lostClaims(ctx context.Context, p layout.JobPaths, items []ItemStatus, claims map[int]bool) error {
	for i := range items {
		is := &items[i]
		if !claims[is.Item] || is.Failover != "" {
			continue
		}
		data, _, err := a.st.Get(ctx, p.Claim(is.Item))
		if errors.Is(err, store.ErrNoNode) {
			continue // completed or queued again since the listing
		}
		if err != nil {
			return fmt.Errorf("coord: read %s: %w", p.Claim(is.Item), err)
		}
		if is.FailoverLost = layout.DecodeClaimRecord(data).Server; is.FailoverLost == "" {
			is.FailoverLost = "?"
		}
	}
	return nil
}

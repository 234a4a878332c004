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

// JobStatus is a job's status as `shardflow status --json` prints it. Every
// field is always present in the JSON (empty strings, null times, empty
// lists), as docs/operations.md documents it.
type JobStatus struct {
	Job string `json:"job"`
	// Config holds the stored config fields as strings, by node name.
	Config map[string]string `json:"config"`
	// ConfigError is set when the stored config does not decode or validate.
	ConfigError string         `json:"configError"`
	Leader      string         `json:"leader"`
	Servers     []ServerStatus `json:"servers"`
	Items       []ItemStatus   `json:"items"`
	// ReshardingPending is the leader/sharding/necessary flag.
	ReshardingPending bool `json:"reshardingPending"`
	// FailoverQueue lists items waiting to be failed over.
	FailoverQueue []int `json:"failoverQueue"`
	// NextFireTime is the cron's next fire time after the status was read;
	// null when the job has no cron (runs only on triggers) or the stored
	// config is invalid.
	NextFireTime *time.Time `json:"nextFireTime"`
	// Actions are the latest operator actions on the job, newest first
	// (at most MaxAuditEntries).
	Actions []Action `json:"actions"`
	// Refused lists the servers refusing to run this stored job (a
	// command or URL outside their allow-list, an invalid config).
	Refused []RefusedServer `json:"refused,omitempty"`
	// Health sums the status up: HealthOK, HealthDegraded or HealthFailing.
	Health string `json:"health"`
	// HealthReasons say why Health is not HealthOK, one line each (empty
	// when it is).
	HealthReasons []string `json:"healthReasons"`
}

// Job health values (JobStatus.Health).
const (
	// HealthOK: no item's last run failed, and nothing below applies.
	HealthOK = "ok"
	// HealthDegraded: nothing fails, but no server is online, the job is
	// paused on some or all of them, a server refuses the stored job, or
	// a failover claim was lost with its claimant.
	HealthDegraded = "degraded"
	// HealthFailing: an item's last run ended in an error
	// (ItemStatus.ConsecutiveFailures > 0), a server reports an error
	// (ServerStatus.LastError: a source backing off a failing statement,
	// a refused Begin), or the stored config is invalid.
	HealthFailing = "failing"
)

// ServerStatus is one server of a job.
type ServerStatus struct {
	ID       string `json:"id"`
	HostName string `json:"hostName"`
	// Status is "READY", "RUNNING" or "OFFLINE".
	Status   string `json:"status"`
	Sharding []int  `json:"sharding"`
	// ProcessSuccessCount and ProcessFailureCount are the last reporting
	// interval's counts (processCountIntervalSeconds), as in ElasticJob.
	ProcessSuccessCount int64 `json:"processSuccessCount"`
	ProcessFailureCount int64 `json:"processFailureCount"`
	// TotalSuccessCount and TotalFailureCount are cumulative over every
	// interval this server id has reported, across its restarts.
	TotalSuccessCount int64 `json:"totalSuccessCount"`
	TotalFailureCount int64 `json:"totalFailureCount"`
	Disabled          bool  `json:"disabled"`
	Paused            bool  `json:"paused"`
	Shutdown          bool  `json:"shutdown"`
	// LastError is the last run error this server reported (clock skew, bad
	// config); "" when none.
	LastError string `json:"lastError"`
	// CountsAsOf is when the counts above were last written (each run's
	// Complete, every processCountIntervalSeconds, and the server's
	// graceful stop); null when never.
	CountsAsOf *time.Time `json:"countsAsOf"`
}

// ItemStatus is one shard item of a job: every item in
// 0..shardingTotalCount-1, plus an item beyond a lowered total while it
// still runs.
type ItemStatus struct {
	Item      int  `json:"item"`
	Running   bool `json:"running"`
	Completed bool `json:"completed"`
	// Failover is the id of the server that took the item over; "" when none.
	Failover string `json:"failover"`
	// FailoverLost is the id of a server whose failover claim on the item
	// ended with its session before its run completed: the leader queues
	// the item again (its next failover scan); "" when none.
	FailoverLost     string     `json:"failoverLost,omitempty"`
	Misfire          bool       `json:"misfire"`
	Disabled         bool       `json:"disabled"`
	LastBeginTime    *time.Time `json:"lastBeginTime"`
	LastCompleteTime *time.Time `json:"lastCompleteTime"`
	// NextFireTime is the job's next cron fire time; null for a disabled
	// item or a job without cron.
	NextFireTime *time.Time `json:"nextFireTime"`
	// ConsecutiveFailures is how many runs of the item in a row, up to
	// its last, ended in an error (counted on its current owner); 0 when
	// its last run succeeded.
	ConsecutiveFailures int `json:"consecutiveFailures"`
	// FailingSince is when the first of those runs ended; null when the
	// item is not failing.
	FailingSince *time.Time `json:"failingSince"`
	// LastError is the error of the item's last failed run, whole (an
	// error over 4 KiB keeps its first KiB and its end, where the cause
	// is); "" when the item is not failing.
	LastError string `json:"lastError"`
	// FailingOn is the server whose runs of the item failed; "" when the
	// item is not failing.
	FailingOn string `json:"failingOn"`
}

// status reads a job's status. Items are 0..shardingTotalCount-1 of the
// stored config (plus any item beyond it still running); the next fire time
// is derived from the stored cron at the time of the read, so it is never
// stale and disappears with the cron.
func (a *tree) status(ctx context.Context, job string) (JobStatus, error) {
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

// nodeRead is one of a server's nodes as serverStatus read it (ok false:
// gone before its read).
type nodeRead struct {
	d    []byte
	stat store.Stat
	ok   bool
}

// readServerNodes reads server s's nodes kids (reads, in kids' order) and
// its run record, side by side: one after the other they made a status
// read of a 10,000-item job on 3 servers 10-20 ms slower once a server's
// count nodes exist from its join (df5f163).
func (a *tree) readServerNodes(ctx context.Context, p layout.JobPaths, s string, kids []string) ([]nodeRead, *storedRecord, error) {
	reads := make([]nodeRead, len(kids))
	var rec *storedRecord
	g, gctx := errgroup.WithContext(ctx)
	for i, k := range kids {
		if k == layout.NRun {
			continue
		}
		g.Go(func() error {
			d, stat, err := a.st.Get(gctx, p.Server(s, k))
			if errors.Is(err, store.ErrNoNode) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("coord: read %s: %w", p.Server(s, k), err)
			}
			reads[i] = nodeRead{d: d, stat: stat, ok: true}
			return nil
		})
	}
	if slices.Contains(kids, layout.NRun) {
		g.Go(func() error {
			d, nst, err := a.st.Get(gctx, p.Server(s, layout.NRun))
			if errors.Is(err, store.ErrNoNode) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("coord: read %s: %w", p.Server(s, layout.NRun), err)
			}
			r, derr := layout.DecodeRunRecord(d)
			if derr != nil {
				return nil
			}
			found := &storedRecord{rec: r, server: s, mzxid: nst.Mzxid}
			if nst.NumChildren > 0 {
				if found.live, _, err = a.st.Exists(gctx, p.Server(s, layout.NRun, layout.NLive)); err != nil {
					return fmt.Errorf("coord: read %s: %w", p.Server(s, layout.NRun, layout.NLive), err)
				}
			}
			rec = found
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return reads, rec, nil
}

// serverStatus reads server s's nodes, and its run record (nil: none, or
// malformed, which only costs the per-item reads it would have saved).
func (a *tree) serverStatus(ctx context.Context, p layout.JobPaths, s string) (ServerStatus, *storedRecord, error) {
	ss := ServerStatus{ID: s, Status: layout.StatusOffline, Sharding: []int{}}
	kids, nst, err := a.st.Children(ctx, p.Server(s))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return ss, nil, fmt.Errorf("coord: read %s: %w", p.Server(s), err)
	}
	if layout.CountsUnwritten(nst) {
		// Its count nodes hold the 0s its registration created them
		// with, no report since: 0, never written, without their 4 reads.
		kids = slices.DeleteFunc(slices.Clone(kids), func(k string) bool { return slices.Contains(layout.CountNodes, k) })
	}
	reads, rec, err := a.readServerNodes(ctx, p, s, kids)
	if err != nil {
		return ss, nil, err
	}
	for i, k := range kids {
		if !reads[i].ok {
			continue
		}
		d, stat := reads[i].d, reads[i].stat
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
func (a *tree) itemStatuses(ctx context.Context, p layout.JobPaths, cfg jobconfig.Config, valid bool, next *time.Time, recs []storedRecord) ([]ItemStatus, error) {
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
func (a *tree) readItems(ctx context.Context, p layout.JobPaths, out []ItemStatus, present map[int]bool, recs []storedRecord, monitor bool) error {
	kids, err := a.listItems(ctx, p, out, present)
	if err != nil {
		return err
	}
	var gets []itemGet
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
				gets = append(gets, itemGet{is: is, name: k})
			}
		}
	}
	if err := a.getItemNodes(ctx, p, gets); err != nil {
		return err
	}
	// A failover run's times, per item.
	fbegin, fcomplete := map[*ItemStatus]stamp{}, map[*ItemStatus]stamp{}
	for _, r := range gets {
		if !r.found {
			continue
		}
		if r.name == layout.NFailover {
			r.is.Failover = r.val
			continue
		}
		t, terr := layout.ParseTime([]byte(r.val))
		if terr != nil {
			continue
		}
		if r.name == layout.NLastBeginTime {
			fbegin[r.is] = stamp{&t, r.mzxid}
		} else {
			fcomplete[r.is] = stamp{&t, r.mzxid}
		}
	}
	newest := newestRecords(recs)
	for i := range out {
		is := &out[i]
		itemTimes(is, newest[is.Item], fbegin[is], fcomplete[is], running[i], monitor)
	}
	return nil
}

// itemGet is one value a status read gets below an item's container, and
// what it found.
type itemGet struct {
	is    *ItemStatus
	name  string
	val   string
	mzxid int64
	found bool
}

// stamp is a time read from a node, with the node's Mzxid: which of an
// item's runs came last. A zero stamp (t nil) is none.
type stamp struct {
	t     *time.Time
	mzxid int64
}

// newestRecords maps each item to the newest run record naming it.
func newestRecords(recs []storedRecord) map[int]*storedRecord {
	newest := map[int]*storedRecord{}
	for i := range recs {
		for _, it := range recs[i].rec.Items {
			if r := newest[it]; r == nil || r.mzxid < recs[i].mzxid {
				newest[it] = &recs[i]
			}
		}
	}
	return newest
}

// listItems lists the children of the items of out that have a container
// (present), layout.ItemReaders at a time; kids[i] are out[i]'s.
func (a *tree) listItems(ctx context.Context, p layout.JobPaths, out []ItemStatus, present map[int]bool) ([][]string, error) {
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
	return kids, g.Wait()
}

// getItemNodes reads the nodes gets name, layout.ItemReaders at a time; a node
// deleted since its listing is left not found.
func (a *tree) getItemNodes(ctx context.Context, p layout.JobPaths, gets []itemGet) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i := range gets {
		r := &gets[i]
		g.Go(func() error {
			d, st, err := a.st.Get(gctx, p.Item(r.is.Item, r.name))
			if errors.Is(err, store.ErrNoNode) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("coord: read %s: %w", p.Item(r.is.Item, r.name), err)
			}
			r.val, r.mzxid, r.found = string(d), st.Mzxid, true
			return nil
		})
	}
	return g.Wait()
}

// itemTimes sets an item's times and its running and completed states
// from its newest run: a failover run that began after rec (the newest
// record naming the item, nil when none), whose begin and complete are fb
// and fc (zero when absent), else rec's run. running: the item's running
// node exists; monitor: the config monitors execution (else nothing runs
// for readers).
func itemTimes(is *ItemStatus, rec *storedRecord, fb, fc stamp, running, monitor bool) {
	failoverDone := fb.t != nil && fc.t != nil && fc.mzxid > fb.mzxid
	if fb.t != nil && (rec == nil || fb.mzxid > rec.mzxid) {
		// A failover run is the item's newest.
		is.LastBeginTime = fb.t
		if failoverDone {
			is.LastCompleteTime = fc.t
		}
		is.Running = running && monitor
		is.Completed = !is.Running && failoverDone
		return
	}
	if rec == nil || recordTime(rec.rec.Begin) == nil {
		return
	}
	is.LastBeginTime = recordTime(rec.rec.Begin)
	if f, ok := rec.rec.Failing[is.Item]; ok {
		is.ConsecutiveFailures, is.FailingSince, is.LastError, is.FailingOn = f.Runs, recordTime(f.Since), f.Error, rec.server
	}
	if rec.rec.Complete != "" {
		is.LastCompleteTime = recordTime(rec.rec.Complete)
		is.Completed = rec.rec.Monitor
	} else if failoverDone {
		// The record's run has not completed; the item's last
		// completion is an earlier failover run's.
		is.LastCompleteTime = fc.t
	}
	is.Running = monitor && (rec.live && rec.rec.Complete == "" && rec.rec.Monitor || running)
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
func (a *tree) lostClaims(ctx context.Context, p layout.JobPaths, items []ItemStatus, claims map[int]bool) error {
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

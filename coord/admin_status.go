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
	cfg, cerr := decodeStoredConfig(p, job, st.Config)
	if cerr != nil {
		st.ConfigError = cerr.Error()
	}
	st.NextFireTime = nextFire(cfg, cerr, time.Now())
	if st.Leader, _, err = a.getOpt(ctx, p.abs(relHost)); err != nil {
		return st, err
	}
	if st.ReshardingPending, _, err = a.st.Exists(ctx, p.abs(relNecessary)); err != nil {
		return st, fmt.Errorf("coord: read %s: %w", p.abs(relNecessary), err)
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
	q, _, err := a.st.Children(ctx, p.abs(relFailoverQ))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return st, fmt.Errorf("coord: read %s: %w", p.abs(relFailoverQ), err)
	}
	for _, n := range q {
		if it, ok := parseItemName(n); ok {
			st.FailoverQueue = append(st.FailoverQueue, it)
		}
	}
	slices.Sort(st.FailoverQueue)
	if st.Actions, err = a.audit(ctx, p, job); err != nil {
		return st, err
	}
	if st.Refused, err = a.refused(ctx, p); err != nil {
		return st, err
	}
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
	rec   runRecord
	mzxid int64
}

// serverStatus reads server s's nodes, and its run record (nil: none, or
// malformed, which only costs the per-item reads it would have saved).
func (a *admin) serverStatus(ctx context.Context, p jobPaths, s string) (ServerStatus, *storedRecord, error) {
	ss := ServerStatus{ID: s, Status: statusOffline, Sharding: []int{}}
	var rec *storedRecord
	kids, _, err := a.st.Children(ctx, p.server(s))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return ss, nil, fmt.Errorf("coord: read %s: %w", p.server(s), err)
	}
	for _, k := range kids {
		if k == nRun {
			d, nst, err := a.st.Get(ctx, p.server(s, k))
			if err != nil && !errors.Is(err, store.ErrNoNode) {
				return ss, nil, fmt.Errorf("coord: read %s: %w", p.server(s, k), err)
			}
			if err == nil {
				if r, derr := decodeRunRecord(d); derr == nil {
					rec = &storedRecord{rec: r, mzxid: nst.Mzxid}
				}
			}
			continue
		}
		v, ok, err := a.getOpt(ctx, p.server(s, k))
		if err != nil {
			return ss, nil, err
		}
		if !ok {
			continue
		}
		switch k {
		case nHostName:
			ss.HostName = v
		case nStatus:
			ss.Status = v
		case nSharding:
			items, perr := parseItems([]byte(v))
			if perr != nil && ss.LastError == "" {
				ss.LastError = fmt.Sprintf("%s: %v", p.server(s, k), perr)
			}
			if items != nil {
				ss.Sharding = items
			}
		case nSuccess:
			ss.ProcessSuccessCount, _ = parseCount([]byte(v))
		case nFailure:
			ss.ProcessFailureCount, _ = parseCount([]byte(v))
		case nSuccessTotal:
			ss.TotalSuccessCount, _ = parseCount([]byte(v))
		case nFailureTotal:
			ss.TotalFailureCount, _ = parseCount([]byte(v))
		case nDisabled:
			ss.Disabled = flagTrue([]byte(v))
		case nPaused:
			ss.Paused = flagTrue([]byte(v))
		case nShutdown:
			ss.Shutdown = flagTrue([]byte(v))
		case nLastError:
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
func (a *admin) itemStatuses(ctx context.Context, p jobPaths, cfg jobconfig.Config, valid bool, next *time.Time, recs []storedRecord) ([]ItemStatus, error) {
	execNames, _, err := a.st.Children(ctx, p.abs(nExecution))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.abs(nExecution), err)
	}
	present := map[int]bool{} // item -> has an execution node
	for _, n := range execNames {
		if it, ok := parseItemName(n); ok {
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
			if running, _, err := a.st.Exists(ctx, p.item(it, nRunning)); err != nil {
				return nil, fmt.Errorf("coord: read %s: %w", p.item(it, nRunning), err)
			} else if running {
				shown[it] = true
			}
		}
	}
	items := slices.Sorted(maps.Keys(shown))
	out := make([]ItemStatus, len(items))
	for i, it := range items {
		out[i] = ItemStatus{Item: it}
	}
	if err := a.readItems(ctx, p, out, present, recs); err != nil {
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

// itemReaders is how many per-item reads a scan of the items (a status
// read, the leader's failover scan) keeps in flight. A job of thousands of
// items costs one children listing per item (plus a read per timestamp in
// a status); one session pipelines them (go-zookeeper has no multi-read),
// so the scan takes about (requests / itemReaders) round trips.
const itemReaders = 512

// readItems fills out (the items in present) from execution/{item} in two
// pipelined waves: every item's children listing, then every value those
// listings named (failover owner, begin and complete times) that no run
// record vouches for (see vouch). Each wave keeps itemReaders requests in
// flight, so the read costs two waves of round trips rather than four
// sequential round trips per item; at rest, with the run records, the
// second wave is empty.
func (a *admin) readItems(ctx context.Context, p jobPaths, out []ItemStatus, present map[int]bool, recs []storedRecord) error {
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
	stats := make([]store.Stat, len(out))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(itemReaders)
	for i := range out {
		if !present[out[i].Item] {
			continue
		}
		g.Go(func() error {
			ks, st, err := a.st.Children(gctx, p.item(out[i].Item))
			if err != nil && !errors.Is(err, store.ErrNoNode) {
				return fmt.Errorf("coord: read %s: %w", p.item(out[i].Item), err)
			}
			kids[i], stats[i] = ks, st
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var gets []get
	for i := range out {
		is := &out[i]
		rec := vouch(newest[is.Item], kids[i], stats[i])
		for _, k := range kids[i] {
			switch k {
			case nRunning:
				is.Running = true
			case nCompleted:
				is.Completed = true
			case nMisfire:
				is.Misfire = true
			case nDisabled:
				is.Disabled = true
			case nLastBeginTime:
				if rec != nil {
					is.LastBeginTime = recordTime(rec.Begin)
					continue
				}
				gets = append(gets, get{is, k})
			case nLastCompleteTime:
				if rec != nil && rec.Complete != "" {
					is.LastCompleteTime = recordTime(rec.Complete)
					continue
				}
				gets = append(gets, get{is, k})
			case nFailover:
				gets = append(gets, get{is, k})
			}
		}
	}
	vals := make([]string, len(gets))
	found := make([]bool, len(gets))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(itemReaders)
	for i, r := range gets {
		g.Go(func() error {
			var err error
			vals[i], found[i], err = a.getOpt(gctx, p.item(r.is.Item, r.name))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, r := range gets {
		if !found[i] {
			continue // deleted between the listing and the read
		}
		if r.name == nFailover {
			r.is.Failover = vals[i]
			continue
		}
		t, terr := parseTime([]byte(vals[i]))
		if terr != nil {
			continue
		}
		if r.name == nLastBeginTime {
			r.is.LastBeginTime = &t
		} else {
			r.is.LastCompleteTime = &t
		}
	}
	return nil
}

// vouch returns the run record whose times an item's status may take instead
// of reading the item's lastBeginTime and lastCompleteTime, or nil. rec is
// the newest record naming the item, kids and st the item container's
// children and Stat. The record wrote those times itself (in the same
// transaction as its last part, after the earlier ones: runrecord.go), so it
// vouches when nothing could have written them since:
//   - the record says it may (Vouch: a monitored run; for a completion,
//     one fenced by the versions its Begin saw, so no other run began its
//     items during it: runRecord.Vouch); every later run of the item by
//     any server changes its children (a running node, or re-created
//     times without monitorExecution);
//   - the container's children and data are unchanged since the record
//     (Pzxid, Mzxid at most the record's Mzxid): no later Begin, undo,
//     misfire flag, failover claim or mark, or re-creation;
//   - its children agree with the record's state (running and not
//     completed while the record runs; completed and not running once it
//     completed): a Complete whose last part failed, or a stale completion
//     that replaced a newer record, does not vouch for the items it names.
//
// An item it does not vouch for is read as before: the record only saves
// reads, it never decides what the status shows beyond the two times.
func vouch(r *storedRecord, kids []string, st store.Stat) *runRecord {
	if r == nil || !r.rec.Vouch || st.Pzxid > r.mzxid || st.Mzxid > r.mzxid {
		return nil
	}
	running, completed := slices.Contains(kids, nRunning), slices.Contains(kids, nCompleted)
	if r.rec.Complete == "" && (!running || completed) || r.rec.Complete != "" && (running || !completed) {
		return nil
	}
	if recordTime(r.rec.Begin) == nil || r.rec.Complete != "" && recordTime(r.rec.Complete) == nil {
		return nil
	}
	return &r.rec
}

// recordTime decodes a time of a run record; nil when malformed.
func recordTime(s string) *time.Time {
	t, err := parseTime([]byte(s))
	if err != nil {
		return nil
	}
	return &t
}

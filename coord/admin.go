package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

type admin struct {
	st store.Store
	ns string
}

func newAdmin(st store.Store, namespace string) *admin {
	if namespace == "" {
		namespace = protocol.DefaultNamespace
	}
	return &admin{st: st, ns: namespace}
}

func (a *admin) paths(job string) layout.JobPaths { return layout.NewJobPaths(a.ns, job) }

func (a *admin) jobs(ctx context.Context) ([]string, error) {
	names, _, err := a.st.Children(ctx, store.Join(a.ns))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: list jobs under %s: %w", store.Join(a.ns), err)
	}
	var out []string
	for _, n := range names {
		if ok, _, err := a.st.Exists(ctx, store.Join(a.ns, n, layout.NConfig)); err == nil && ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// requireJob fails with ErrNoJob unless the job's config node exists.
func (a *admin) requireJob(ctx context.Context, job string) (layout.JobPaths, error) {
	p := a.paths(job)
	if job == "" || strings.Contains(job, "/") {
		return p, fmt.Errorf("%w: job name %q", ErrNoJob, job)
	}
	ok, _, err := a.st.Exists(ctx, p.Abs(layout.NConfig))
	if err != nil {
		return p, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
	}
	if !ok {
		return p, fmt.Errorf("%w: %q in namespace %q", ErrNoJob, job, a.ns)
	}
	return p, nil
}

// servers returns the job's servers, or just server (ErrNoServer if absent).
func (a *admin) servers(ctx context.Context, p layout.JobPaths, job, server string) ([]string, error) {
	names, _, err := a.st.Children(ctx, p.Abs(layout.NServers))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NServers), err)
	}
	if server == "" {
		return names, nil
	}
	if !slices.Contains(names, server) {
		return nil, fmt.Errorf("%w: %q of job %q", ErrNoServer, server, job)
	}
	return []string{server}, nil
}

// onlineServers returns the servers among names that are online
// (serverState: a process holds them), read directly.
func (a *admin) onlineServers(ctx context.Context, p layout.JobPaths, names []string) ([]string, error) {
	var online []string
	for _, s := range names {
		state, _, err := layout.ReadServerState(ctx, a.st, p, s)
		if err != nil {
			return nil, err
		}
		if state.Online {
			online = append(online, s)
		}
	}
	return online, nil
}

func (a *admin) raiseResharding(ctx context.Context, p layout.JobPaths) error {
	if err := layout.RaiseFlag(ctx, a.st, p); err != nil {
		return fmt.Errorf("coord: raise the resharding flag %s: %w", p.Abs(layout.RelNecessary), err)
	}
	return nil
}

// trigger writes a trigger node for server, or for every server of the job
// that would run on it, and returns the servers asked. A named server must
// be able to run: online, not shut down, disabled or paused (each refused
// with the reason); with server "" the others are skipped, and none left is
// refused.
func (a *admin) trigger(ctx context.Context, job, server string) ([]string, error) {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return nil, err
	}
	names, err := a.servers(ctx, p, job, server)
	if err != nil {
		return nil, err
	}
	var asked, skipped []string
	for _, s := range names {
		why, err := a.cannotRun(ctx, p, s)
		if err != nil {
			return nil, err
		}
		switch {
		case why == "":
			asked = append(asked, s)
		case server != "":
			return nil, fmt.Errorf("%w: trigger job %q on server %q: the server %s", ErrCannotRun, job, s, why)
		default:
			skipped = append(skipped, s+" "+why)
		}
	}
	if len(asked) == 0 {
		if len(skipped) == 0 {
			return nil, fmt.Errorf("%w: trigger job %q: no server has joined it; start one first", ErrCannotRun, job)
		}
		return nil, fmt.Errorf("%w: trigger job %q: no server can run it: %s", ErrCannotRun, job, strings.Join(skipped, "; "))
	}
	for _, s := range asked {
		if _, err := a.st.Create(ctx, p.Server(s, layout.NTrigger), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return nil, fmt.Errorf("coord: trigger %s: %w", p.Server(s, layout.NTrigger), err)
		}
	}
	return asked, nil
}

// cannotRun says why server s would not run a trigger ("" when it would):
// offline, shut down, disabled (it owns no items) or paused.
func (a *admin) cannotRun(ctx context.Context, p layout.JobPaths, s string) (string, error) {
	state, ok, err := layout.ReadServerState(ctx, a.st, p, s)
	if err != nil {
		return "", err
	}
	switch {
	case !ok || !state.Online:
		return "is offline (no process holds it); start it first", nil
	case state.Shutdown:
		return "is shut down; restart its process first", nil
	case state.Disabled:
		return "is disabled, so it owns no items; enable it first", nil
	}
	paused, ok, err := a.getOpt(ctx, p.Server(s, layout.NPaused))
	if err != nil {
		return "", err
	}
	if ok && layout.FlagTrue([]byte(paused)) {
		return "is paused; resume it first", nil
	}
	return "", nil
}

func (a *admin) setServerFlag(ctx context.Context, job, server, flag string, on bool) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	names, err := a.servers(ctx, p, job, server)
	if err != nil {
		return err
	}
	membership := flag == layout.NDisabled || flag == layout.NShutdown
	for _, s := range names {
		path := p.Server(s, flag)
		err := layout.MultiRetry(ctx, a.st, func(ctx context.Context, _ int) ([]store.Op, error) {
			ops, err := layout.PutOps(ctx, a.st, []string{path}, [][]byte{layout.FlagData(on)})
			if membership && err == nil {
				// The leader's reshard must not clear the flag on a plan
				// that still counts this server in or out.
				ops = append(ops, layout.TouchMembership(p))
			}
			return ops, err
		})
		if err != nil {
			return fmt.Errorf("coord: write %s: %w", path, err)
		}
	}
	if membership {
		return a.raiseResharding(ctx, p)
	}
	return nil
}

func (a *admin) setItemDisabled(ctx context.Context, job string, item int, on bool) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	if err := a.checkItem(ctx, p, job, item); err != nil {
		return err
	}
	if err := store.CreateAll(ctx, a.st, p.Item(item)); err != nil {
		return fmt.Errorf("coord: create %s: %w", p.Item(item), err)
	}
	if on {
		if _, err := a.st.Create(ctx, p.Item(item, layout.NDisabled), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: write %s: %w", p.Item(item, layout.NDisabled), err)
		}
		return nil
	}
	if err := a.st.Delete(ctx, p.Item(item, layout.NDisabled), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: delete %s: %w", p.Item(item, layout.NDisabled), err)
	}
	return nil
}

// checkItem refuses an item outside 0..shardingTotalCount-1 of the job's
// current stored config. Only the total is needed, so a config broken in
// another field still lets an operator act on items.
func (a *admin) checkItem(ctx context.Context, p layout.JobPaths, job string, item int) error {
	text, ok, err := a.getOpt(ctx, p.Config(jobconfig.FieldShardingTotalCount))
	if err != nil {
		return err
	}
	total, cerr := strconv.Atoi(strings.TrimSpace(text))
	if !ok || cerr != nil || total <= 0 {
		return fmt.Errorf("%w: %s is %q, so item %d cannot be checked; set the total first (`shardflow config set --job %s %s 8`)",
			protocol.ErrBadConfig, p.Config(jobconfig.FieldShardingTotalCount), text, item, job, jobconfig.FieldShardingTotalCount)
	}
	if item < 0 || item >= total {
		return fmt.Errorf("%w: item %d of job %q: its shardingTotalCount is %d, so items are 0..%d", ErrNoItem, item, job, total, total-1)
	}
	return nil
}

func (a *admin) shutdown(ctx context.Context, job, server string) error {
	return a.setServerFlag(ctx, job, server, layout.NShutdown, true)
}

func (a *admin) remove(ctx context.Context, job, server string) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	names, err := a.servers(ctx, p, job, server)
	if err != nil {
		return err
	}
	live, err := a.onlineServers(ctx, p, names)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("coord: remove job %q: servers %v are live; shut them down first (`shardflow shutdown`)", job, live)
	}
	target := p.Root
	if server != "" {
		target = p.Server(server)
	}
	if err := store.DeleteAll(ctx, a.st, target); err != nil {
		return fmt.Errorf("coord: remove %s: %w", target, err)
	}
	if server != "" {
		return a.raiseResharding(ctx, p)
	}
	return nil
}

func (a *admin) readFields(ctx context.Context, p layout.JobPaths) (map[string]string, error) {
	names, _, err := a.st.Children(ctx, p.Abs(layout.NConfig))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
	}
	fields := make(map[string]string, len(names))
	for _, n := range names {
		d, _, err := a.st.Get(ctx, p.Config(n))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("coord: read %s: %w", p.Config(n), err)
		}
		fields[n] = string(d)
	}
	return fields, nil
}

func (a *admin) getConfig(ctx context.Context, job string) (jobconfig.Config, error) {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return jobconfig.Config{}, err
	}
	fields, err := a.readFields(ctx, p)
	if err != nil {
		return jobconfig.Config{}, err
	}
	return layout.DecodeStoredConfig(p, job, fields)
}

func (a *admin) setConfig(ctx context.Context, job, field, value string) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	// The config node's version before the fields: the transaction checks
	// it, so the copy it writes never drops a concurrent writer's edit.
	_, cst, err := a.st.Get(ctx, p.Abs(layout.NConfig))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
	}
	fields, err := a.readFields(ctx, p)
	if err != nil {
		return err
	}
	// Start from what decodes; a broken stored config is repaired field by field.
	cur, derr := jobconfig.FromFields(job, fields)
	if derr != nil {
		good := maps.Clone(fields)
		for _, fe := range jobconfig.FieldErrors(derr) {
			delete(good, fe.Field)
		}
		cur, _ = jobconfig.FromFields(job, good)
	}
	next, err := jobconfig.SetField(cur, field, value)
	if err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	if err := explicitPositive(field, value); err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	if err := a.checkDependsOn(ctx, job, field, next); err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	newFields := next.Fields()
	if _, err := layout.ConfigFromFields(job, mergeRepaired(fields, newFields, field)); err != nil {
		return fmt.Errorf("coord: set %s: the resulting config is invalid: %w", p.Config(field), err)
	}
	// The field and the config node (its version bumped, its data a copy
	// of every field) together: servers watch only the config node
	// (docs/zookeeper-layout.md).
	err = layout.MultiRetry(ctx, a.st, func(ctx context.Context, attempt int) ([]store.Op, error) {
		stored := fields
		if attempt > 0 {
			// A concurrent writer: its fields, then this one on top.
			var err error
			if _, cst, err = a.st.Get(ctx, p.Abs(layout.NConfig)); err != nil {
				return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
			}
			if stored, err = a.readFields(ctx, p); err != nil {
				return nil, err
			}
		}
		ops, err := layout.PutOps(ctx, a.st, []string{p.Config(field)}, [][]byte{[]byte(newFields[field])})
		if err != nil {
			return nil, err
		}
		return append(ops, layout.WriteConfigNode(p, mergeRepaired(stored, newFields, field), cst.Version)), nil
	})
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", p.Config(field), err)
	}
	old := fields[field]
	if err := a.linkDependsOn(ctx, job, field, old, next); err != nil {
		return err
	}
	return a.afterConfigSet(ctx, p, field, old, newFields[field], next)
}

// afterConfigSet makes what an edit of field from old to value implies
// beyond the field: a changed total reshards and prunes the items beyond
// it; monitoring or failover turned off clears what failover left queued
// or claimed.
func (a *admin) afterConfigSet(ctx context.Context, p layout.JobPaths, field, old, value string, next jobconfig.Config) error {
	switch field {
	case jobconfig.FieldShardingTotalCount:
		if old != value {
			if err := a.raiseResharding(ctx, p); err != nil {
				return err
			}
			return a.pruneItemsBeyond(ctx, p, next.ShardingTotalCount)
		}
	case jobconfig.FieldMonitorExecution:
		if value == "false" {
			// No failover without monitoring (docs/configuration.md):
			// the queue and the claims no run has taken go (the running
			// nodes of failover runs tell which claims a run holds:
			// those end with their run); claimers and Begins check the
			// edit themselves too. Nothing else is deleted: the live
			// markers of runs begun monitored go with their Complete,
			// and readers consult them only while the config monitors.
			if err := a.clearQueue(ctx, p); err != nil {
				return err
			}
			if err := a.clearIdleClaims(ctx, p); err != nil {
				return err
			}
			return a.bumpFailoverDir(ctx, p)
		}
	case jobconfig.FieldFailover:
		if value == "false" {
			if err := a.clearExecutionNodes(ctx, p, layout.NFailover); err != nil {
				return err
			}
			if err := a.clearQueue(ctx, p); err != nil {
				return err
			}
			return a.bumpFailoverDir(ctx, p)
		}
	}
	return nil
}

// defaultedCounts are the count fields whose 0 in a program's JobConfig
// means "the default"; an operator setting one means a value, so it must be
// > 0 (docs/configuration.md).
var defaultedCounts = map[string]string{
	jobconfig.FieldFetchDataCount:                   "100",
	jobconfig.FieldConcurrentDataProcessThreadCount: "8",
	jobconfig.FieldProcessCountIntervalSeconds:      "300",
	jobconfig.FieldReconcileIntervalSeconds:         "60",
}

// explicitPositive refuses an operator's value <= 0 for a defaulted count.
func explicitPositive(field, value string) error {
	example, ok := defaultedCounts[field]
	if !ok {
		return nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil && n <= 0 {
		return &jobconfig.FieldError{Field: field, Problem: fmt.Sprintf("must be > 0, got %d", n),
			Fix: "give a positive number, e.g. " + example}
	}
	return nil
}

// pruneItemsBeyond deletes the execution nodes of items >= total that no
// server runs now (the leader prunes the others at its next reshard, which
// waits for them), so a lowered total leaves no stale items in the tree or
// in status.
func (a *admin) pruneItemsBeyond(ctx context.Context, p layout.JobPaths, total int) error {
	names, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, n := range names {
		it, ok := layout.ParseItemName(n)
		if !ok || it < total {
			continue
		}
		running, _, err := a.st.Exists(ctx, p.Item(it, layout.NRunning))
		if err != nil {
			return fmt.Errorf("coord: read %s: %w", p.Item(it, layout.NRunning), err)
		}
		if running {
			continue
		}
		if err := store.DeleteAll(ctx, a.st, p.Item(it)); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: remove %s (beyond shardingTotalCount %d): %w", p.Item(it), total, err)
		}
		// An idle claim went with the item's node: its record too
		// (claimrecord.go), or the leader would take it for a claim lost.
		if err := a.st.Delete(ctx, p.Claim(it), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", p.Claim(it), err)
		}
	}
	return nil
}

// mergeRepaired is the stored fields with field replaced by its new text.
func mergeRepaired(stored, next map[string]string, field string) map[string]string {
	m := maps.Clone(stored)
	m[field] = next[field]
	return m
}

func (a *admin) clearExecutionNodes(ctx context.Context, p layout.JobPaths, node string) error {
	items, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, it := range items {
		path := store.Join(p.Abs(layout.NExecution), it, node)
		if err := a.st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", path, err)
		}
	}
	return nil
}

// clearIdleClaims deletes the failover nodes of items that do not run: a
// claim no run has taken. Each in one Multi asserting that no running node
// exists (created and deleted in it), so a failover run that begins
// meanwhile keeps its claim (its owner must go on skipping the item).
func (a *admin) clearIdleClaims(ctx context.Context, p layout.JobPaths) error {
	items, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, it := range items {
		claim := store.Join(p.Abs(layout.NExecution), it, layout.NFailover)
		running := store.Join(p.Abs(layout.NExecution), it, layout.NRunning)
		_, err := a.st.Multi(ctx,
			&store.CreateOp{Path: running, Mode: store.Ephemeral},
			&store.DeleteOp{Path: running, Version: store.AnyVersion},
			&store.DeleteOp{Path: claim, Version: store.AnyVersion})
		if err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: delete %s: %w", claim, err)
		}
	}
	return nil
}

// bumpFailoverDir bumps the failover directory's data version after the
// admin's failover writes (a Begin planned on the claims before them plans
// again: markRunning).
func (a *admin) bumpFailoverDir(ctx context.Context, p layout.JobPaths) error {
	if _, err := a.st.Set(ctx, p.Abs(layout.RelFailoverQ), nil, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: write %s: %w", p.Abs(layout.RelFailoverQ), err)
	}
	return nil
}

func (a *admin) clearQueue(ctx context.Context, p layout.JobPaths) error {
	q, _, err := a.st.Children(ctx, p.Abs(layout.RelFailoverQ))
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.RelFailoverQ), err)
	}
	for _, n := range q {
		if err := a.st.Delete(ctx, store.Join(p.Abs(layout.RelFailoverQ), n), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", store.Join(p.Abs(layout.RelFailoverQ), n), err)
		}
	}
	return nil
}

// getOpt reads a node's data; a missing node is ("", false, nil).
func (a *admin) getOpt(ctx context.Context, path string) (string, bool, error) {
	d, _, err := a.st.Get(ctx, path)
	if errors.Is(err, store.ErrNoNode) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("coord: read %s: %w", path, err)
	}
	return string(d), true, nil
}

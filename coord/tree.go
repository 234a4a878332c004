package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// tree is a namespace's nodes in the store, as the operator API reads and
// writes them; the Admins As returns share it.
type tree struct {
	st store.Store
	ns string
}

// paths are job's paths in the namespace.
func (a *tree) paths(job string) layout.JobPaths { return layout.NewJobPaths(a.ns, job) }

// requireJob fails with ErrNoJob unless the job's config node exists.
func (a *tree) requireJob(ctx context.Context, job string) (layout.JobPaths, error) {
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
func (a *tree) servers(ctx context.Context, p layout.JobPaths, job, server string) ([]string, error) {
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
func (a *tree) onlineServers(ctx context.Context, p layout.JobPaths, names []string) ([]string, error) {
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

// raiseResharding raises the job's resharding flag (layout.RaiseFlag):
// after a membership change an operator made, the leader reshards.
func (a *tree) raiseResharding(ctx context.Context, p layout.JobPaths) error {
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
func (a *tree) trigger(ctx context.Context, p layout.JobPaths, job, server string) ([]string, error) {
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
func (a *tree) cannotRun(ctx context.Context, p layout.JobPaths, s string) (string, error) {
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

// setServerFlag sets (on) or clears an operator flag (paused, disabled,
// shutdown) of server, or of every server of the job. disabled and
// shutdown change the membership: each write bumps its version and the
// resharding flag is raised after them.
func (a *tree) setServerFlag(ctx context.Context, p layout.JobPaths, job, server, flag string, on bool) error {
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

// setItemDisabled disables (on) or enables an item of the job's current
// total (checkItem).
func (a *tree) setItemDisabled(ctx context.Context, p layout.JobPaths, job string, item int, on bool) error {
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
func (a *tree) checkItem(ctx context.Context, p layout.JobPaths, job string, item int) error {
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

// remove deletes an offline server's node (resharding flagged), or the
// whole job with server "", refusing while any of them is live.
func (a *tree) remove(ctx context.Context, p layout.JobPaths, job, server string) error {
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

// readFields reads the job's config fields, by node name.
func (a *tree) readFields(ctx context.Context, p layout.JobPaths) (map[string]string, error) {
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

// getOpt reads a node's data; a missing node is ("", false, nil).
func (a *tree) getOpt(ctx context.Context, path string) (string, bool, error) {
	d, _, err := a.st.Get(ctx, path)
	if errors.Is(err, store.ErrNoNode) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("coord: read %s: %w", path, err)
	}
	return string(d), true, nil
}

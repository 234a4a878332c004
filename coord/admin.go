package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

type admin struct {
	st store.Store
	ns string
}

func newAdmin(st store.Store, namespace string) *admin {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &admin{st: st, ns: namespace}
}

func (a *admin) paths(job string) jobPaths { return newJobPaths(a.ns, job) }

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
		if ok, _, err := a.st.Exists(ctx, store.Join(a.ns, n, nConfig)); err == nil && ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// requireJob fails with ErrNoJob unless the job's config node exists.
func (a *admin) requireJob(ctx context.Context, job string) (jobPaths, error) {
	p := a.paths(job)
	if job == "" || strings.Contains(job, "/") {
		return p, fmt.Errorf("%w: job name %q", ErrNoJob, job)
	}
	ok, _, err := a.st.Exists(ctx, p.abs(nConfig))
	if err != nil {
		return p, fmt.Errorf("coord: read %s: %w", p.abs(nConfig), err)
	}
	if !ok {
		return p, fmt.Errorf("%w: %q in namespace %q", ErrNoJob, job, a.ns)
	}
	return p, nil
}

// servers returns the job's servers, or just server (ErrNoServer if absent).
func (a *admin) servers(ctx context.Context, p jobPaths, job, server string) ([]string, error) {
	names, _, err := a.st.Children(ctx, p.abs(nServers))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.abs(nServers), err)
	}
	if server == "" {
		return names, nil
	}
	if !slices.Contains(names, server) {
		return nil, fmt.Errorf("%w: %q of job %q", ErrNoServer, server, job)
	}
	return []string{server}, nil
}

func (a *admin) liveServers(ctx context.Context, p jobPaths, names []string) ([]string, error) {
	var live []string
	for _, s := range names {
		ok, _, err := a.st.Exists(ctx, p.server(s, nStatus))
		if err != nil {
			return nil, fmt.Errorf("coord: read %s: %w", p.server(s, nStatus), err)
		}
		if ok {
			live = append(live, s)
		}
	}
	return live, nil
}

// put sets a node's data, creating it if absent.
func (a *admin) put(ctx context.Context, path string, data []byte) error {
	_, err := a.st.Set(ctx, path, data, store.AnyVersion)
	if errors.Is(err, store.ErrNoNode) {
		_, err = a.st.Create(ctx, path, data, store.Persistent)
		if errors.Is(err, store.ErrNodeExists) {
			_, err = a.st.Set(ctx, path, data, store.AnyVersion)
		}
	}
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", path, err)
	}
	return nil
}

func (a *admin) raiseResharding(ctx context.Context, p jobPaths) error {
	if _, err := a.st.Create(ctx, p.abs(relNecessary), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
		return fmt.Errorf("coord: raise the resharding flag %s: %w", p.abs(relNecessary), err)
	}
	return nil
}

func (a *admin) trigger(ctx context.Context, job string) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	names, err := a.servers(ctx, p, job, "")
	if err != nil {
		return err
	}
	live, err := a.liveServers(ctx, p, names)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		return fmt.Errorf("coord: trigger job %q: no live server; start one first", job)
	}
	for _, s := range live {
		if _, err := a.st.Create(ctx, p.server(s, nTrigger), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: trigger %s: %w", p.server(s, nTrigger), err)
		}
	}
	return nil
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
	for _, s := range names {
		if err := a.put(ctx, p.server(s, flag), flagData(on)); err != nil {
			return err
		}
	}
	if flag == nDisabled {
		return a.raiseResharding(ctx, p)
	}
	return nil
}

func (a *admin) setItemDisabled(ctx context.Context, job string, item int, on bool) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	if item < 0 {
		return fmt.Errorf("coord: item %d of job %q: items are 0..shardingTotalCount-1", item, job)
	}
	if err := store.CreateAll(ctx, a.st, p.item(item)); err != nil {
		return fmt.Errorf("coord: create %s: %w", p.item(item), err)
	}
	if on {
		if _, err := a.st.Create(ctx, p.item(item, nDisabled), nil, store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: write %s: %w", p.item(item, nDisabled), err)
		}
		return nil
	}
	if err := a.st.Delete(ctx, p.item(item, nDisabled), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: delete %s: %w", p.item(item, nDisabled), err)
	}
	return nil
}

func (a *admin) shutdown(ctx context.Context, job, server string) error {
	return a.setServerFlag(ctx, job, server, nShutdown, true)
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
	live, err := a.liveServers(ctx, p, names)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("coord: remove job %q: servers %v are live; shut them down first (`shardflow shutdown`)", job, live)
	}
	target := p.root
	if server != "" {
		target = p.server(server)
	}
	if err := store.DeleteAll(ctx, a.st, target); err != nil {
		return fmt.Errorf("coord: remove %s: %w", target, err)
	}
	if server != "" {
		return a.raiseResharding(ctx, p)
	}
	return nil
}

func (a *admin) readFields(ctx context.Context, p jobPaths) (map[string]string, error) {
	names, _, err := a.st.Children(ctx, p.abs(nConfig))
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.abs(nConfig), err)
	}
	fields := make(map[string]string, len(names))
	for _, n := range names {
		d, _, err := a.st.Get(ctx, p.config(n))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("coord: read %s: %w", p.config(n), err)
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
	return decodeStoredConfig(p, job, fields)
}

func (a *admin) setConfig(ctx context.Context, job, field, value string) error {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
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
		return fmt.Errorf("coord: set %s: %w", p.config(field), err)
	}
	newFields := next.Fields()
	if _, err := configFromFields(job, mergeRepaired(fields, newFields, field)); err != nil {
		return fmt.Errorf("coord: set %s: the resulting config is invalid: %w", p.config(field), err)
	}
	if err := a.put(ctx, p.config(field), []byte(newFields[field])); err != nil {
		return err
	}
	old := fields[field]
	switch field {
	case jobconfig.FieldShardingTotalCount:
		if old != newFields[field] {
			return a.raiseResharding(ctx, p)
		}
	case jobconfig.FieldMonitorExecution:
		if newFields[field] == "false" {
			return a.clearExecutionNodes(ctx, p, nRunning)
		}
	case jobconfig.FieldFailover:
		if newFields[field] == "false" {
			if err := a.clearExecutionNodes(ctx, p, nFailover); err != nil {
				return err
			}
			return a.clearQueue(ctx, p)
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

func (a *admin) clearExecutionNodes(ctx context.Context, p jobPaths, node string) error {
	items, _, err := a.st.Children(ctx, p.abs(nExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.abs(nExecution), err)
	}
	for _, it := range items {
		path := store.Join(p.abs(nExecution), it, node)
		if err := a.st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", path, err)
		}
	}
	return nil
}

func (a *admin) clearQueue(ctx context.Context, p jobPaths) error {
	q, _, err := a.st.Children(ctx, p.abs(relFailoverQ))
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.abs(relFailoverQ), err)
	}
	for _, n := range q {
		if err := a.st.Delete(ctx, store.Join(p.abs(relFailoverQ), n), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", store.Join(p.abs(relFailoverQ), n), err)
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

func (a *admin) status(ctx context.Context, job string) (JobStatus, error) {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return JobStatus{}, err
	}
	st := JobStatus{Job: job, Servers: []ServerStatus{}, Items: []ItemStatus{}, FailoverQueue: []int{}}
	if st.Config, err = a.readFields(ctx, p); err != nil {
		return st, err
	}
	cfg, cerr := decodeStoredConfig(p, job, st.Config)
	if cerr != nil {
		st.ConfigError = cerr.Error()
	}
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
	for _, s := range names {
		kids, _, err := a.st.Children(ctx, p.server(s))
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return st, fmt.Errorf("coord: read %s: %w", p.server(s), err)
		}
		ss := ServerStatus{ID: s, Status: statusOffline, Sharding: []int{}}
		for _, k := range kids {
			v, ok, err := a.getOpt(ctx, p.server(s, k))
			if err != nil {
				return st, err
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
				if perr != nil {
					ss.LastError = fmt.Sprintf("%s: %v", p.server(s, k), perr)
				}
				if items != nil {
					ss.Sharding = items
				}
			case nSuccess:
				ss.ProcessSuccessCount, _ = parseCount([]byte(v))
			case nFailure:
				ss.ProcessFailureCount, _ = parseCount([]byte(v))
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
		st.Servers = append(st.Servers, ss)
	}
	execNames, _, err := a.st.Children(ctx, p.abs(nExecution))
	if err != nil {
		return st, fmt.Errorf("coord: read %s: %w", p.abs(nExecution), err)
	}
	present := map[int]bool{}
	for _, n := range execNames {
		if it, ok := parseItemName(n); ok {
			present[it] = true
		}
	}
	total := cfg.ShardingTotalCount
	for it := range max(total, 0) {
		present[it] = true
	}
	for _, it := range slices.Sorted(maps.Keys(present)) {
		is := ItemStatus{Item: it}
		kids, _, err := a.st.Children(ctx, p.item(it))
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return st, fmt.Errorf("coord: read %s: %w", p.item(it), err)
		}
		for _, k := range kids {
			switch k {
			case nRunning:
				is.Running = true
			case nCompleted:
				is.Completed = true
			case nMisfire:
				is.Misfire = true
			case nDisabled:
				is.Disabled = true
			case nFailover, nLastBeginTime, nLastCompleteTime, nNextFireTime:
				v, ok, err := a.getOpt(ctx, p.item(it, k))
				if err != nil {
					return st, err
				}
				if !ok {
					continue
				}
				if k == nFailover {
					is.Failover = v
					continue
				}
				t, terr := parseTime([]byte(v))
				if terr != nil {
					continue
				}
				switch k {
				case nLastBeginTime:
					is.LastBeginTime = &t
				case nLastCompleteTime:
					is.LastCompleteTime = &t
				case nNextFireTime:
					is.NextFireTime = &t
				}
			}
		}
		st.Items = append(st.Items, is)
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
	return st, nil
}

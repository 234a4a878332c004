package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// Jobs stored without code (SCRIPT and HTTP jobs, `shardflow job add`) and
// the workers' refusals to run them (docs/zookeeper-layout.md).

// maxStoredJobs is jobconfig.MaxStoredJobs; tests lower it.
var maxStoredJobs = jobconfig.MaxStoredJobs

// RefusedServer is a server that refuses to run a stored job, and why.
type RefusedServer struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// CreateJob stores a new job's config (after defaults and validation) in
// one transaction, so a watcher of the namespace sees the job with its
// whole config at once. Nothing runs it until a server joins it: a
// `shardflow serve` worker does for SCRIPT and HTTP jobs. Errors: a
// *jobconfig.FieldError (ErrInvalid), ErrJobExists, or a store error.
// The creation is recorded in the job's audit log as "create".
func (a *Admin) CreateJob(ctx context.Context, cfg jobconfig.Config) error {
	cfg = cfg.WithDefaults()
	act := Action{Job: cfg.JobName, Action: "create", Detail: describeCreated(cfg)}
	return a.audited(ctx, act, func() error { return a.createJob(ctx, cfg) })
}

// describeCreated is the audit's account of a created job, e.g.
// `SCRIPT job, 4 items, cron "0 * * * * ?", command "/opt/jobs/x"`.
func describeCreated(cfg jobconfig.Config) string {
	d := fmt.Sprintf("%s job, %d items", cfg.Type(), cfg.ShardingTotalCount)
	if cfg.Cron == "" {
		d += ", run on trigger only"
	} else {
		d += fmt.Sprintf(", cron %q", cfg.Cron)
	}
	switch cfg.Type() {
	case jobconfig.JobTypeScript:
		d += fmt.Sprintf(", command %q", cfg.Script.CommandLine)
	case jobconfig.JobTypeHTTP:
		d += fmt.Sprintf(", %s %s", cfg.HTTP.Method, jobconfig.RedactField(jobconfig.FieldHTTPURL, cfg.HTTP.URL))
	}
	return d
}

// createJob stores cfg, its defaults filled in, after validating it.
func (a *tree) createJob(ctx context.Context, cfg jobconfig.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("coord: create job %q: %w", cfg.JobName, err)
	}
	if err := a.checkDependsOn(ctx, cfg.JobName, jobconfig.FieldDependsOn, cfg); err != nil {
		return fmt.Errorf("coord: create job %q: %w", cfg.JobName, err)
	}
	p := a.paths(cfg.JobName)
	if err := store.CreateAll(ctx, a.st, store.Join(a.ns)); err != nil {
		return fmt.Errorf("coord: create %s: %w", store.Join(a.ns), err)
	}
	// The children, not the decodable jobs: every one costs the watchers.
	names, _, err := a.st.Children(ctx, store.Join(a.ns))
	if err != nil {
		return fmt.Errorf("coord: list %s: %w", store.Join(a.ns), err)
	}
	if len(names) >= maxStoredJobs {
		return fmt.Errorf("%w: namespace %q holds %d jobs, the limit (jobconfig.MaxStoredJobs); remove unused jobs (`shardflow job remove`) or use another namespace",
			ErrTooManyJobs, a.ns, len(names))
	}
	fields := layout.ConfigFields(cfg)
	// servers and execution too, so status reads a job nobody joined yet.
	// The config node holds a copy of the fields (writeConfigNode).
	ops := []store.Op{&store.CreateOp{Path: p.Root}, &store.CreateOp{Path: p.Abs(layout.NConfig), Data: layout.FormatConfigCopy(fields)},
		&store.CreateOp{Path: p.Abs(layout.NServers)}, &store.CreateOp{Path: p.Abs(layout.NExecution)}}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		ops = append(ops, &store.CreateOp{Path: p.Config(k), Data: []byte(fields[k])})
	}
	if _, err := a.st.Multi(ctx, ops...); err != nil {
		if errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("%w: %q", ErrJobExists, cfg.JobName)
		}
		return fmt.Errorf("coord: create job %q: %w", cfg.JobName, err)
	}
	return a.linkDependsOn(ctx, cfg.JobName, jobconfig.FieldDependsOn, "", cfg)
}

// refused reads the job's refusals, sorted by server id.
func (a *tree) refused(ctx context.Context, p layout.JobPaths) ([]RefusedServer, error) {
	names, _, err := a.st.Children(ctx, p.Abs(layout.NRefused))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NRefused), err)
	}
	var out []RefusedServer
	for _, n := range names {
		v, ok, err := a.getOpt(ctx, store.Join(p.Abs(layout.NRefused), n))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, RefusedServer{ID: n, Reason: v})
		}
	}
	return out, nil
}

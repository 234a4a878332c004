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

// nRefused holds one EPHEMERAL child per server refusing to run the job,
// data = the reason (the command or URL is not in its allow-list, or the
// stored config is invalid).
const nRefused = "refused"

// ErrJobExists: CreateJob found the job already stored.
var ErrJobExists = errors.New("coord: job already exists in this namespace; pick another name or remove it first (`shardflow job remove`)")

// ErrTooManyJobs: CreateJob found the namespace at jobconfig.MaxStoredJobs.
var ErrTooManyJobs = errors.New("coord: too many jobs in the namespace")

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
	act := Action{Job: cfg.JobName, Action: "create", Detail: describeCreated(cfg.WithDefaults())}
	return a.impl.audited(ctx, a.actor, act, func() error { return a.impl.createJob(ctx, cfg) })
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

func (a *admin) createJob(ctx context.Context, cfg jobconfig.Config) error {
	cfg = cfg.WithDefaults()
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

// ReportRefused records, as an ephemeral node of st's session, that server
// refuses to run job and why; `shardflow status` shows it until the
// session ends or ClearRefused. The job must exist (ErrNoJob).
func ReportRefused(ctx context.Context, st store.Store, namespace, job, server, reason string) error {
	a := newAdmin(st, namespace)
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return err
	}
	dir := p.Abs(nRefused)
	if err := store.CreateAll(ctx, st, dir); err != nil {
		return fmt.Errorf("coord: create %s: %w", dir, err)
	}
	path := store.Join(dir, server)
	_, err = st.Create(ctx, path, []byte(reason), store.Ephemeral)
	if errors.Is(err, store.ErrNodeExists) {
		_, err = st.Set(ctx, path, []byte(reason), store.AnyVersion)
	}
	if err != nil {
		return fmt.Errorf("coord: record refusal %s: %w", path, err)
	}
	return nil
}

// ClearRefused deletes server's refusal of job; none is fine.
func ClearRefused(ctx context.Context, st store.Store, namespace, job, server string) error {
	path := store.Join(newAdmin(st, namespace).paths(job).Abs(nRefused), server)
	if err := st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: clear refusal %s: %w", path, err)
	}
	return nil
}

// refused reads the job's refusals, sorted by server id.
func (a *admin) refused(ctx context.Context, p layout.JobPaths) ([]RefusedServer, error) {
	names, _, err := a.st.Children(ctx, p.Abs(nRefused))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(nRefused), err)
	}
	var out []RefusedServer
	for _, n := range names {
		v, ok, err := a.getOpt(ctx, store.Join(p.Abs(nRefused), n))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, RefusedServer{ID: n, Reason: v})
		}
	}
	return out, nil
}

package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/eventloop"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
)

// DefaultNamespace is RegistryConfig.Namespace's default.
const DefaultNamespace = "shardflow"

// DefaultOfflineServerGrace is RegistryConfig.OfflineServerGrace's default.
const DefaultOfflineServerGrace = 10 * time.Minute

// Registry is one process's membership in a namespace. All its jobs share
// one store session. Safe for concurrent use.
type Registry struct {
	st   store.Store
	cfg  RegistryConfig
	loop *eventloop.Loop // runs the jobs' watchers

	mu     sync.Mutex
	jobs   map[string]*Job
	closed bool
	// nsReady: the namespace node is known to exist (ensureNamespace).
	nsReady atomic.Bool
	// nsMu serialises ensureNamespace's first run; stored holds the jobs
	// the namespace listed then (a join of one of them reads its stored
	// nodes without waiting for the job node's listing).
	nsMu   sync.Mutex
	stored map[string]bool
}

// NewRegistry returns a Registry over st. It does not own st: closing the
// Registry leaves st open.
func NewRegistry(st store.Store, cfg RegistryConfig) (*Registry, error) {
	if st == nil {
		return nil, errors.New("coord: NewRegistry needs a store.Store; open one with memstore or zkstore")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := store.ValidatePath(store.Join(cfg.Namespace)); err != nil || cfg.Namespace != store.Base(store.Join(cfg.Namespace)) {
		return nil, fmt.Errorf("coord: RegistryConfig.Namespace %q must be one path element without slashes", cfg.Namespace)
	}
	if cfg.ServerIDSetting == "" {
		cfg.ServerIDSetting = "RegistryConfig.ServerID"
	}
	if cfg.ServerID == "" {
		id, err := firstIPv4()
		if err != nil {
			return nil, fmt.Errorf("coord: %s is empty and no non-loopback IPv4 address was found (%v); set it (e.g. the pod name)", cfg.ServerIDSetting, err)
		}
		cfg.ServerID = id
	}
	if err := store.ValidatePath("/" + cfg.ServerID); err != nil || store.Base("/"+cfg.ServerID) != cfg.ServerID {
		return nil, fmt.Errorf("coord: %s %q must be one path element without slashes", cfg.ServerIDSetting, cfg.ServerID)
	}
	if cfg.HostName == "" {
		cfg.HostName, _ = os.Hostname()
	}
	if cfg.OfflineServerGrace <= 0 {
		cfg.OfflineServerGrace = DefaultOfflineServerGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{st: st, cfg: cfg, loop: eventloop.New(st), jobs: make(map[string]*Job)}, nil
}

// firstIPv4 returns the host's first non-loopback IPv4 address.
func firstIPv4() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
			if v4 := ipn.IP.To4(); v4 != nil {
				return v4.String(), nil
			}
		}
	}
	return "", errors.New("no interface has one")
}

// ServerID returns the effective server id.
func (r *Registry) ServerID() string { return r.cfg.ServerID }

// serverIDSetting names the ServerID setting in errors.
func (r *Registry) serverIDSetting() string { return r.cfg.ServerIDSetting }

// Join registers this server for the job: applies the overwrite rule to the
// config, registers servers/{id}, joins leader election, and sets the
// resharding flag. The returned Job's Config is the effective (stored) one;
// when a stored config wins over a differing local one, Join logs a warning
// naming the differing fields.
//
// If this server id's status node is still held by another session (this
// process's previous incarnation, killed and not yet expired), Join waits
// for it to go, up to the store's session timeout, and then fails with
// ErrServerIDInUse. It also fails with ErrBadConfig, or a store error.
func (r *Registry) Join(ctx context.Context, cfg jobconfig.Config) (*Job, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("coord: Registry is closed")
	}
	if _, dup := r.jobs[cfg.JobName]; dup {
		r.mu.Unlock()
		return nil, fmt.Errorf("coord: job %q already joined by this Registry; Leave it first", cfg.JobName)
	}
	// Reserve the name while joining.
	r.jobs[cfg.JobName] = nil
	r.mu.Unlock()

	local, err := prepareLocal(cfg)
	var j *Job
	if err != nil {
		err = fmt.Errorf("coord: join job %q: %w", cfg.JobName, err)
	} else {
		j, err = r.startJobAcrossBlips(ctx, local)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		delete(r.jobs, cfg.JobName)
		return nil, err
	}
	r.jobs[cfg.JobName] = j
	return j, nil
}

// joinAttempts bounds startJob's attempts across connection losses.
const joinAttempts = 5

// startJobAcrossBlips is startJob, tried again from the start when an
// attempt failed because the connection dropped (replicas starting at once
// on a loaded ZooKeeper, a member restarting): it waits, within ctx, until
// the session is connected again. Every step of startJob may be repeated:
// the writes are create-or-set, and the registration is made on the session
// current then.
func (r *Registry) startJobAcrossBlips(ctx context.Context, local localConfig) (*Job, error) {
	for attempt := 1; ; attempt++ {
		j, err := startJob(ctx, r, local)
		if err == nil || attempt == joinAttempts || ctx.Err() != nil ||
			!errors.Is(err, ErrSessionLost) && !recipe.LostConnection(r.st, err) {
			return j, err
		}
		r.cfg.Logger.Info("coord: join interrupted by a lost connection; joining again once the session is connected",
			"job", local.cfg.JobName, "attempt", attempt, "err", err)
		sess, werr := store.AwaitSession(ctx, r.st, func(s store.Session) bool {
			return s.State == store.StateConnected || s.State == store.StateClosed
		})
		if werr != nil || sess.State == store.StateClosed {
			return nil, err
		}
	}
}

// ensureNamespace creates the namespace node unless a join of this
// Registry made sure of it already (it is never deleted by coord).
func (r *Registry) ensureNamespace(ctx context.Context) error {
	if r.nsReady.Load() {
		return nil
	}
	r.nsMu.Lock()
	defer r.nsMu.Unlock()
	if r.nsReady.Load() {
		return nil
	}
	ns := store.Join(r.cfg.Namespace)
	if err := store.CreateAll(ctx, r.st, ns); err != nil {
		return fmt.Errorf("create %s: %w", ns, err)
	}
	// One listing per process: the jobs stored at its start (a restart's
	// AddJobs), a hint only (storedAtStart).
	if names, _, err := r.st.Children(ctx, ns); err == nil {
		r.stored = make(map[string]bool, len(names))
		for _, n := range names {
			r.stored[n] = true
		}
	}
	r.nsReady.Store(true)
	return nil
}

// storedAtStart reports whether the namespace listed job when this
// registry first looked (ensureNamespace). A hint: a join of such a job
// reads its stored nodes beside the job node's listing, which decides.
func (r *Registry) storedAtStart(job string) bool {
	r.nsMu.Lock()
	defer r.nsMu.Unlock()
	return r.stored[job]
}

// forget is called by a job's Leave.
func (r *Registry) forget(name string, j *Job) {
	r.mu.Lock()
	if r.jobs[name] == j {
		delete(r.jobs, name)
	}
	r.mu.Unlock()
}

// Close leaves every joined job and stops the Registry's goroutines. It
// waits for them; ctx bounds the wait. Safe to call twice. The jobs leave
// side by side, each as its Leave would, their store writes shared: the
// offline operations of many jobs go in a few transactions (each job's
// together in one), so closing a Registry of thousands of jobs takes a few
// store round trips, not one per job.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	jobs := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		if j != nil {
			jobs = append(jobs, j)
		}
	}
	r.mu.Unlock()
	// Side by side, their offline writes shared (leave.go).
	return leaveJobs(ctx, jobs)
}

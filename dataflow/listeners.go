package dataflow

import (
	"context"
	"time"
)

// RunInfo describes one run on this server, as listeners see it.
type RunInfo struct {
	// JobName is the job's name.
	JobName string
	// ServerID is this server's id.
	ServerID string
	// Reason says why the run started.
	Reason Reason
	// Items are this server's shard items in this run, failover items first.
	// It may be empty: a server with no items still runs (and calls listeners).
	Items []int
	// ScheduledFire is the cron fire time the run serves, as Quartz's
	// scheduledFireTime: set for ReasonCron, zero for the others (a
	// catch-up run serves every fire its previous run overran).
	// Started.Sub(ScheduledFire) is the scheduler's delay; the time to
	// BeforeRun adds the run's coordination.
	ScheduledFire time.Time
	// Started is when the run began (before coordination).
	Started time.Time
	// WorkflowRun is the workflow run the run serves ("" for a job in no
	// workflow); Items are then only the items not completed in it yet.
	WorkflowRun string
}

// JobListener is told before and after each run of a job on this server,
// as ElasticJob's ElasticJobListener. Calls for one job come from one
// goroutine, one run at a time; one listener added to several jobs is
// called concurrently. ctx is the run's context (cancelled when ownership
// is lost or the Node hard-stops). A panic is recovered and reported to
// NodeConfig.OnError.
type JobListener interface {
	// BeforeRun is called after the run's items are marked running and
	// before the pipeline starts.
	BeforeRun(ctx context.Context, info RunInfo)
	// AfterRun is called after the run is completed in the coordination
	// store, with its counts and error (see RunResult.Err).
	AfterRun(ctx context.Context, info RunInfo, result RunResult)
}

// OnceListener runs callbacks once per run across all servers of a job
// (ElasticJob's AbstractDistributeOnceElasticJobListener): BeforeAll on
// the server whose items complete the set registered under
// guarantee/started, before any server's pipeline starts; AfterAll likewise
// under guarantee/completed after every server's pipeline has finished.
// The other servers wait for the callback to finish, up to StartedTimeout
// or CompletedTimeout (<= 0: forever); a timeout is reported to
// NodeConfig.OnError (wrapping protocol.ErrGuaranteeTimeout) and the run goes
// on. Either callback may be nil.
type OnceListener struct {
	// BeforeAll runs on one server before the run's pipelines start; ctx
	// is that server's run context. Its error is reported to OnError.
	BeforeAll func(ctx context.Context) error
	// AfterAll runs on one server after every server's pipeline finished.
	AfterAll func(ctx context.Context) error
	// StartedTimeout bounds the wait for BeforeAll; <= 0 waits forever.
	StartedTimeout time.Duration
	// CompletedTimeout bounds the wait for AfterAll; <= 0 waits forever.
	CompletedTimeout time.Duration
}

// JobOption configures a job added to a Node.
type JobOption func(*jobOptions)

type jobOptions struct {
	listeners []JobListener
	once      []OnceListener
}

// WithListeners adds listeners called before and after every run of the
// job on this server, in the order given.
func WithListeners(ls ...JobListener) JobOption {
	return func(o *jobOptions) { o.listeners = append(o.listeners, ls...) }
}

// WithOnceListeners adds distribute-once listeners, called in the order
// given.
func WithOnceListeners(ls ...OnceListener) JobOption {
	return func(o *jobOptions) { o.once = append(o.once, ls...) }
}

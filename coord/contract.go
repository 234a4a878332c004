// Package coord is the operator API of shardflow jobs over a coordination
// store: status (JobStatus), operator actions (Admin: trigger, pause,
// resume, disable, enable, shutdown, remove, config), the audit log, job
// health and jobs stored without code. The protocol the servers run is
// package coord/protocol, below this one.
package coord

import (
	"context"
	"errors"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// Sentinel errors of the operator API.
var (
	// ErrNoJob: the named job does not exist in the namespace.
	ErrNoJob = errors.New("coord: no such job in this namespace; check --namespace and --job")
	// ErrNoServer: the named server is not registered for the job.
	ErrNoServer = errors.New("coord: no such server for this job; check --server against `shardflow status`")
	// ErrNoItem: the named shard item is outside the job's current
	// 0..shardingTotalCount-1.
	ErrNoItem = errors.New("coord: no such shard item for this job; items are 0..shardingTotalCount-1, see `shardflow status`")
	// ErrCannotRun: a trigger named a server that would not run it
	// (offline, shut down, disabled or paused), or no server of the job
	// would; the error says which and why.
	ErrCannotRun = errors.New("coord: no server to run the trigger")
)

// Admin is the operator API over a namespace: status, trigger, pause, resume,
// disable, enable, shutdown, remove, config get/set. It needs no Registry:
// any process with a store session can act. server "" means every server.
//
// Every input is checked against the job's current stored state before
// anything is written, so the CLI, the console and programs get the same
// checks: a job that exists (ErrNoJob), a server registered for it
// (ErrNoServer), an item in 0..shardingTotalCount-1 (ErrNoItem), and config
// values through jobconfig's validation (a *jobconfig.FieldError naming the
// field and the fix). A refused action changes nothing.
//
// Each action that succeeds is recorded in the job's bounded audit log
// (JobStatus.Actions) under the Admin's actor (As); refused ones are not.
type Admin struct {
	// impl is shared by the Admins As returns: one store and namespace,
	// each with its own actor.
	impl  *admin
	actor string
}

// NewAdmin returns an Admin over st for namespace (default "shardflow").
// Its actions are recorded as done by "user@host" of this process; As
// names another actor.
func NewAdmin(st store.Store, namespace string) *Admin {
	return &Admin{impl: newAdmin(st, namespace), actor: defaultActor()}
}

// As returns an Admin sharing a's store and namespace whose actions are
// recorded as done by actor (e.g. "console:alice from 10.0.0.7").
func (a *Admin) As(actor string) *Admin { return &Admin{impl: a.impl, actor: actor} }

// Actor returns the name a's actions are recorded under.
func (a *Admin) Actor() string { return a.actor }

// Jobs lists the job names in the namespace, sorted.
func (a *Admin) Jobs(ctx context.Context) ([]string, error) { return a.impl.jobs(ctx) }

// Status reads a job's full status (see JobStatus), with its secrets
// redacted: the values of secret config fields (jobconfig.IsSecretField:
// HTTP header values, URL query strings) read "REDACTED" in Config, and
// in every error text, refusal reason and audit entry. Every view shows
// this model; Config returns the stored values for programs that run the
// job.
func (a *Admin) Status(ctx context.Context, job string) (JobStatus, error) {
	st, err := a.impl.status(ctx, job)
	redactStatus(&st)
	return st, err
}

// Trigger asks every server of the job that can run it to run now (see
// TriggerServer).
func (a *Admin) Trigger(ctx context.Context, job string) error {
	_, err := a.TriggerServer(ctx, job, "")
	return err
}

// TriggerServer asks server alone to run the job now, or with server ""
// every server that can, and returns the servers asked. A server can run
// when it is online and neither shut down, disabled (it owns no items) nor
// paused: a named server that cannot is refused with ErrCannotRun saying
// why, an unregistered one with ErrNoServer; with server "" the others are
// skipped, and ErrCannotRun when none is left.
func (a *Admin) TriggerServer(ctx context.Context, job, server string) ([]string, error) {
	var asked []string
	err := a.impl.audited(ctx, a.actor, Action{Job: job, Action: "trigger", Server: server}, func() error {
		var err error
		asked, err = a.impl.trigger(ctx, job, server)
		return err
	})
	return asked, err
}

// Pause stops new runs (and streaming loops) on server, or on all servers.
func (a *Admin) Pause(ctx context.Context, job, server string) error {
	return a.serverFlag(ctx, "pause", job, server, layout.NPaused, true)
}

// Resume undoes Pause.
func (a *Admin) Resume(ctx context.Context, job, server string) error {
	return a.serverFlag(ctx, "resume", job, server, layout.NPaused, false)
}

// Disable takes server (or all) out of sharding; kept across its restarts.
func (a *Admin) Disable(ctx context.Context, job, server string) error {
	return a.serverFlag(ctx, "disable", job, server, layout.NDisabled, true)
}

// Enable undoes Disable.
func (a *Admin) Enable(ctx context.Context, job, server string) error {
	return a.serverFlag(ctx, "enable", job, server, layout.NDisabled, false)
}

func (a *Admin) serverFlag(ctx context.Context, action, job, server, flag string, on bool) error {
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: action, Server: server}, func() error {
		return a.impl.setServerFlag(ctx, job, server, flag, on)
	})
}

// DisableItem keeps a shard item from running on any server. item must be
// in 0..shardingTotalCount-1 of the job's current config (else ErrNoItem).
func (a *Admin) DisableItem(ctx context.Context, job string, item int) error {
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: "disable", Item: &item}, func() error {
		return a.impl.setItemDisabled(ctx, job, item, true)
	})
}

// EnableItem undoes DisableItem; the same item check applies.
func (a *Admin) EnableItem(ctx context.Context, job string, item int) error {
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: "enable", Item: &item}, func() error {
		return a.impl.setItemDisabled(ctx, job, item, false)
	})
}

// Shutdown stops the job on server (or all servers) until it is restarted.
func (a *Admin) Shutdown(ctx context.Context, job, server string) error {
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: "shutdown", Server: server}, func() error {
		return a.impl.shutdown(ctx, job, server)
	})
}

// Remove deletes an offline server's node, or the whole job when server is "".
// A live server or job refuses with an error saying to shut it down first.
// Removing a whole job removes its audit log with it.
func (a *Admin) Remove(ctx context.Context, job, server string) error {
	if server == "" {
		return a.impl.remove(ctx, job, server)
	}
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: "remove", Server: server}, func() error {
		return a.impl.remove(ctx, job, server)
	})
}

// Config reads the job's stored config, secrets included: for programs
// that run the job. Views show Status, which redacts them.
func (a *Admin) Config(ctx context.Context, job string) (jobconfig.Config, error) {
	return a.impl.getConfig(ctx, job)
}

// SetConfig validates and writes one config field, named as in the config
// node ("cron", "shardingTotalCount", "failover", ...). A value that does
// not validate is refused with a *jobconfig.FieldError and nothing is
// written; an operator's explicit 0 is refused for the counts whose 0 means
// "default" in a program's config (fetchDataCount, ...). Lowering
// shardingTotalCount removes the execution nodes of the items beyond it.
func (a *Admin) SetConfig(ctx context.Context, job, field, value string) error {
	return a.impl.audited(ctx, a.actor, Action{Job: job, Action: "config set", Field: field, Value: value}, func() error {
		return a.impl.setConfig(ctx, job, field, value)
	})
}

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

// MaxAuditEntries bounds a job's audit log: older entries are dropped.
const MaxAuditEntries = 50

// Action is one operator action in a job's audit log.
type Action struct {
	// Time is when the action was done (the acting process's clock).
	Time time.Time `json:"time"`
	// Actor is who did it (Admin.As).
	Actor string `json:"actor"`
	Job   string `json:"-"`
	// Action is "trigger", "pause", "resume", "disable", "enable",
	// "shutdown", "remove", "config set" or "create" (CreateJob).
	Action string `json:"action"`
	// Server is the server acted on; "" for every server.
	Server string `json:"server"`
	// Item is the shard item of an item disable/enable; null otherwise.
	Item *int `json:"item"`
	// Field and Value are the config field and its new text of a config set.
	Field string `json:"field,omitempty"`
	Value string `json:"value,omitempty"`
	// Detail says what a create stored: the job's type, items, schedule
	// and command or URL.
	Detail string `json:"detail,omitempty"`
}

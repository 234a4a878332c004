// Package jobconfig is the configuration of one shardflow job: the fields of
// ElasticJob-Lite's config node, their defaults, their validation, and their
// encoding as the per-field children of /{namespace}/{job}/config.
//
// It sits below both coord (which stores and watches it) and dataflow (which
// re-exports it as dataflow.JobConfig), so the two share one definition.
package jobconfig

import "time"

// ErrorPolicy says what a run does with the first error of user code.
type ErrorPolicy string

// Error policies, after ElasticJob's jobExceptionHandler.
const (
	// ErrorPolicyLog logs the error and goes on (the default).
	ErrorPolicyLog ErrorPolicy = "log"
	// ErrorPolicyReturn reports the error to the job's listeners and to
	// Node's error hook, and marks the run failed in status.
	ErrorPolicyReturn ErrorPolicy = "return"
	// ErrorPolicyIgnore drops the error silently (it is still counted).
	ErrorPolicyIgnore ErrorPolicy = "ignore"
)

// Config is one job's configuration. Build it as a struct literal; zero
// fields take the defaults stated on each field (WithDefaults fills them in),
// and Validate reports every bad field by name with the fix. Every zero
// value is safe: Booleans default to false, intervals are time.Duration.
//
// The stored form keeps ElasticJob-Lite's field names and units (Fields,
// FromFields): ProcessCountInterval is stored as processCountIntervalSeconds,
// DisableMisfire as misfire (inverted), and so on; the Field* constants name
// them, and `shardflow config set` takes those names.
type Config struct {
	// JobName identifies the job; unique within a namespace. A rename is a
	// new job. Required: letters, digits, '-', '_' and '.', at most 128 bytes.
	JobName string
	// Cron is the schedule, a Quartz cron expression read exactly as
	// Quartz reads it (ParseCronIn): "0/5 * * * * ?", "0 15 10 ? * MON-FRI",
	// "0 0 12 L * ?". Empty means the job runs only when triggered.
	Cron string
	// TimeZone is the zone Cron is evaluated in, as ElasticJob 3.x's
	// timeZone: an IANA name ("Asia/Shanghai"), "UTC", or an offset
	// ("GMT+08:00"); see LoadZone. Default "": the local zone of each
	// server process.
	TimeZone string
	// ShardingTotalCount is the number of shard items, numbered 0..n-1.
	// Required, > 0.
	ShardingTotalCount int
	// ShardingItemParameters maps items to parameters: "0=Beijing,1=Shanghai".
	// Items without one get "". Default "".
	ShardingItemParameters string
	// JobParameter is handed to every shard. Default "".
	JobParameter string
	// DisableMonitorExecution stops recording which runs are going (the
	// live marker), which misfire-on-overlap, waiting before resharding,
	// and failover need; a trigger that finds nothing changed then writes
	// nothing (docs/configuration.md, "What monitorExecution = false
	// costs and gives up"). Stored as monitorExecution (its negation).
	// Default false: execution is monitored.
	DisableMonitorExecution bool
	// ProcessCountInterval is how often each server writes its
	// processSuccessCount and processFailureCount. Stored as
	// processCountIntervalSeconds, so whole seconds. Default 5m; must be
	// >= 1s.
	ProcessCountInterval time.Duration
	// ConcurrentDataProcessThreadCount is the number of workers processing
	// fetched items of one shard item. Default 2 x GOMAXPROCS, must be > 0.
	ConcurrentDataProcessThreadCount int
	// FetchDataCount is the most items one Fetch should return. Default 1,
	// must be > 0.
	FetchDataCount int
	// StreamingProcess keeps fetching until a fetch returns nothing (or the
	// job is paused, resharding is due, the node stops or ownership is lost).
	// Default false: one fetch, one process per trigger.
	StreamingProcess bool
	// PipelinedFetch (with StreamingProcess) overlaps the next Fetch of a
	// shard item with the processing of its current batch, for sources
	// whose Fetch is slow (I/O-bound). Fetch must not depend on the
	// current batch being processed (read with a cursor, not "rows still
	// pending"). Ignored without StreamingProcess. Default false: fetch,
	// then process the whole batch, then fetch again (ElasticJob's way).
	PipelinedFetch bool
	// MaxTimeDiff is the tolerated skew between the local clock and the
	// coordination service's. A run is refused when the skew is larger.
	// Stored as maxTimeDiffSeconds, so whole seconds. Default 0: no check
	// (ElasticJob's -1; any value <= 0 disables it).
	MaxTimeDiff time.Duration
	// Failover re-runs a crashed server's running items on a live one at
	// once. Default false.
	Failover bool
	// DisableMisfire drops the triggers that fire during a run instead of
	// running once more right after it. Stored as misfire (its negation).
	// Default false: a run that overlapped a trigger is followed by one
	// catch-up run.
	DisableMisfire bool
	// Description is free text for operators. Default "".
	Description string
	// Overwrite makes this config replace the one stored in the
	// coordination service at start. Default false: a stored config wins.
	Overwrite bool
	// ShardingStrategy names the strategy: "average" (default), "odd-even",
	// "round-robin", or a name registered with sharding.Register.
	ShardingStrategy string
	// Disabled registers this server disabled when it has no stored state;
	// an operator's later enable/disable is kept across restarts. Default false.
	Disabled bool
	// ErrorPolicy is what happens to errors from Fetch and Process.
	// Default ErrorPolicyLog.
	ErrorPolicy ErrorPolicy
	// ReconcileInterval is how often the leader checks that no item is
	// owned by a dead server. Stored as reconcileIntervalSeconds, so whole
	// seconds. Default 1m; must be >= 1s.
	ReconcileInterval time.Duration

	// JobType is the kind of job: JobTypeDataflow (Fetch/Process, the
	// default), JobTypeSimple (one function call per item), JobTypeScript
	// (a command per item) or JobTypeHTTP (a request per item). It is
	// stored in the jobType node and fixed when the job is first stored.
	// dataflow.AddJob and AddSimpleJob set it; leave it empty in Go code.
	JobType JobType
	// Script holds a SCRIPT job's settings (package jobs runs them); empty
	// for every other job type.
	Script ScriptSettings
	// HTTP holds an HTTP job's settings (package jobs runs them); empty for
	// every other job type.
	HTTP HTTPSettings
	// ItemTimeout bounds each shard item's run on every job type: when it
	// passes, the item's context is cancelled (a script's process group is
	// killed) and the item counts a failure that reports "timed out after
	// D". Stored as Go duration text ("30s", "1m30s"). Default 0: no limit;
	// must be >= 0.
	ItemTimeout time.Duration

	// DependsOn names the jobs of the same namespace this job runs after:
	// once per workflow run, when every shard item of every one of them
	// completed in that workflow run on every server (docs/workflows.md).
	// Stored as dependsOn, the names joined by commas. A job with
	// DependsOn has no Cron: its upstream jobs' completion is its schedule.
	// Default none: the job runs on its cron and triggers.
	DependsOn []string
	// UpstreamFailure is what a job with DependsOn does in a workflow run
	// where an upstream step failed (one of its items' runs ended in an
	// error): UpstreamFailureStop (the default) skips this job and every
	// job after it in that workflow run; UpstreamFailureRun runs it anyway.
	UpstreamFailure UpstreamFailure
}

// UpstreamFailure is a dependent job's policy for a failed upstream step.
type UpstreamFailure string

// Upstream failure policies.
const (
	// UpstreamFailureStop skips the job (and the jobs after it) in a
	// workflow run whose upstream step failed. The default.
	UpstreamFailureStop UpstreamFailure = "stop"
	// UpstreamFailureRun runs the job even when an upstream step failed.
	UpstreamFailureRun UpstreamFailure = "run"
)

// ScriptSettings are the settings of a SCRIPT job, stored in the job's
// config node beside the common fields.
type ScriptSettings struct {
	// CommandLine is the command run once per owned item: words split as a
	// shell would split them (quotes and backslash escapes), but no shell
	// runs unless the command names one. Stored as scriptCommandLine.
	// Required for SCRIPT jobs.
	CommandLine string
}

// HTTPSettings are the settings of an HTTP job, stored in the job's config
// node beside the common fields.
type HTTPSettings struct {
	// URL is the absolute http:// or https:// URL one request per owned item
	// goes to. Stored as httpUrl. Required for HTTP jobs.
	URL string
	// Method is the request method. Stored as httpMethod. Default "POST".
	Method string
	// Headers are extra request headers, one "Name: value" per line.
	// Stored as httpHeaders. Default "".
	Headers string
}

// MonitorsExecution reports whether execution is monitored
// (!DisableMonitorExecution).
func (c Config) MonitorsExecution() bool { return !c.DisableMonitorExecution }

// MisfireEnabled reports whether misfire catch-up runs are on
// (!DisableMisfire).
func (c Config) MisfireEnabled() bool { return !c.DisableMisfire }

// Package coord is the operator's API to shardflow jobs: a job's status
// (Admin.Status: its servers, items, failover queue, audit log and health),
// the operator actions (trigger, pause, resume, disable, enable, shutdown,
// remove, config get and set, create a job stored without code), each
// checked against the stored state before anything is written and recorded
// in the job's audit log. Every view (the shardflow CLI, the console, a
// program) goes through Admin, so each sees the same checks and the same
// redacted status.
//
// Admin needs only a store session (coord/store: ZooKeeper, Postgres or
// the embedded memstore); the servers running the jobs speak the protocol
// of package coord/protocol, below this one.
package coord

import (
	"errors"

	"github.com/shardflow/shardflow/coord/protocol"
)

// DefaultNamespace, "shardflow", is the namespace an Admin (and a Node)
// uses when given none: the root node of its jobs, /{namespace}/{job}.
const DefaultNamespace = protocol.DefaultNamespace

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
	// ErrBadConfig: the job's stored config does not decode or validate
	// (Admin.Config, and an item action that needs its total); the error
	// names the field and the fix. It is protocol.ErrBadConfig, which the
	// servers report for the same config.
	ErrBadConfig = protocol.ErrBadConfig
	// ErrJobExists: CreateJob found the job already stored.
	ErrJobExists = errors.New("coord: job already exists in this namespace; pick another name or remove it first (`shardflow job remove`)")
	// ErrTooManyJobs: CreateJob found the namespace at jobconfig.MaxStoredJobs.
	ErrTooManyJobs = errors.New("coord: too many jobs in the namespace")
)

// Package protocol is the cluster protocol of shardflow jobs over a
// coordination store (coord/store): the ElasticJob-Lite 1.x node layout keyed
// by server id, server registration, leader election, resharding with
// pluggable strategies, execution state, misfire, failover, fencing epochs,
// distribute-once barriers, reconcile and the clock check.
//
// The pipeline (package dataflow) sees only Registry, Job and Run: it asks a
// Job to Begin a run, gets shard assignments with fencing epochs and a context
// cancelled when ownership is lost, and Completes the run. The operator API
// (status and actions) is package coord, above this one.
package protocol

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/registration"
	"github.com/shardflow/shardflow/coord/protocol/internal/runs"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// Sentinel errors of the protocol.
var (
	// ErrServerIDInUse: another live process registered the same server id
	// for this job. Give each process its own ServerID (e.g. the pod name).
	ErrServerIDInUse = registration.ErrServerIDInUse
	// ErrSessionLost: the store session is lost; no run may start or commit.
	ErrSessionLost = errors.New("coord: coordination session lost; runs are cancelled until a new session is registered")
	// ErrNotOwner: a fencing check found that this run no longer owns the item
	// (resharded, failed over, or the session was lost). Do not commit.
	ErrNotOwner = errors.New("coord: shard item no longer owned by this run; discard its uncommitted work")
	// ErrItemsRunning: Begin found an item of this server still running; the
	// items were flagged misfire (when enabled) and no run starts.
	ErrItemsRunning = runs.ErrItemsRunning
	// ErrPaused: the job is paused on this server (operator action).
	ErrPaused = errors.New("coord: job paused on this server; resume it to run")
	// ErrShutdown: an operator shut the job down on this server.
	ErrShutdown = errors.New("coord: job shut down on this server by an operator")
	// ErrClockSkew: the local clock differs from the coordination service's by
	// more than maxTimeDiffSeconds. Unwrap *ClockSkewError for the clocks.
	ErrClockSkew = errors.New("coord: clock skew exceeds maxTimeDiffSeconds; synchronise this host's clock (NTP)")
	// ErrBadConfig: the config stored for a job cannot be decoded or is invalid.
	ErrBadConfig = layout.ErrBadConfig
	// ErrGuaranteeTimeout: a distribute-once barrier timed out.
	ErrGuaranteeTimeout = errors.New("coord: distribute-once listener timed out waiting for the other servers")
)

// ClockSkewError names both clocks of a refused run.
type ClockSkewError struct {
	Local, Coordinator time.Time
	MaxDiff            time.Duration
}

// Error names both clocks and the limit.
func (e *ClockSkewError) Error() string {
	return "coord: local clock " + e.Local.UTC().Format(time.RFC3339Nano) +
		" differs from the coordination service's " + e.Coordinator.UTC().Format(time.RFC3339Nano) +
		" by more than " + e.MaxDiff.String() + "; synchronise this host's clock (NTP)"
}

// Unwrap makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Unwrap() error { return ErrClockSkew }

// RegistryConfig configures a Registry. Zero fields take the stated defaults.
type RegistryConfig struct {
	// Namespace is the root node of all jobs: /{Namespace}/{job}. Default "shardflow".
	Namespace string
	// ServerID identifies this process among a job's servers. Default: the
	// host's first non-loopback IPv4 address. Set it (pod name) when several
	// processes share an address.
	ServerID string
	// ServerIDSetting is how errors about ServerID name the setting the user
	// wrote, e.g. "NodeConfig.ServerID". Default "RegistryConfig.ServerID".
	ServerIDSetting string
	// ServerIDWait bounds how long Join waits for this server id's status
	// node, still held by another session, to go (see Join). Default: the
	// store's session timeout. Negative: no wait.
	ServerIDWait time.Duration
	// HostName is recorded in servers/{id}/hostName. Default os.Hostname().
	HostName string
	// OfflineServerGrace is how long an offline server's node is kept before
	// the leader prunes it; nodes an operator disabled are kept. Default 10m.
	OfflineServerGrace time.Duration
	// Logger receives protocol events. Default slog.Default().
	Logger *slog.Logger
	// Now is the local clock. Default time.Now; tests skew it.
	Now func() time.Time
	// TestSignals is for shardflow's own tests, which wait for protocol
	// events (elected, resharded, queued for failover, config applied) on
	// it instead of polling; its type is internal. Leave it nil.
	TestSignals *testsignal.Coord
}

// Signal is a coalesced notification from a Job to the Node hosting it.
type Signal int

// Signals.
const (
	// SignalConfigChanged: the stored config changed (Config returns the new one).
	SignalConfigChanged Signal = iota + 1
	// SignalTrigger: an operator asked for a run now.
	SignalTrigger
	// SignalFailover: items wait in the failover queue; call ClaimFailover when idle.
	SignalFailover
	// SignalShutdown: an operator shut the job down on this server; stop it.
	SignalShutdown
	// SignalRemoved: the job was removed from the namespace; stop it.
	SignalRemoved
	// SignalResharded: this server's sharding node changed (a reshard gave
	// it items, or took some): a job in a workflow runs what the open
	// steps owe it now, without waiting for a trigger.
	SignalResharded
)

// Once runs fn exactly once across all servers of the job for the current
// run (distribute-once): each server registers its items under
// guarantee/{phase}; the server whose registration completes the set (every
// item not disabled by an operator, Admin.DisableItem) runs fn
// and then clears the node; the others wait until it is cleared or timeout
// passes (timeout <= 0: wait forever), then get ErrGuaranteeTimeout. A
// participant whose session is lost while it waits gets ErrSessionLost
// (its registrations, ephemeral, went with the session); one whose ctx
// ends gets ctx.Err() and withdraws its registrations. A withdrawal, or the
// runner's clear, that a cut connection keeps from the store is made when
// the session resumes, before this job registers again: a Once that cannot
// make it (the connection cut still, or again) returns that error without
// registering.
// phase is "started" or "completed". The set is counted on the job's
// current config; Run.Once counts it on the run's snapshot.
func (j *Job) Once(ctx context.Context, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	return j.barrier.run(ctx, j.Config().ShardingTotalCount, phase, items, timeout, fn)
}

// Assignment is one shard item of a run.
type Assignment struct {
	// Item is the shard item, 0..total-1.
	Item int
	// Epoch is the fencing epoch: it changes whenever ownership of the item
	// changes (a resharding, a failover claim, or the item's return to its
	// owner after a failover run). It grows monotonically. Items of one run
	// may carry different epochs.
	Epoch int64
	// Failover is true when the item was taken over from a crashed server.
	Failover bool
}

// Config returns the config snapshot the run began on: Begin took it once,
// computed the run's items with its ShardingTotalCount, and the run's
// pipeline uses it whole. A config edit during the run applies to the next
// run (Job.Config returns it already).
func (r *Run) Config() jobconfig.Config { return r.cfg }

// Once is Job.Once for this run: its items, and the set counted on the
// run's config snapshot, so a config edit during the run cannot change the
// set the servers' runs complete.
func (r *Run) Once(ctx context.Context, phase string, timeout time.Duration, fn func(context.Context) error) error {
	return r.j.barrier.run(ctx, r.cfg.ShardingTotalCount, phase, itemNumbers(r.items), timeout, fn)
}

// ItemParameter returns item's parameter from the run's config snapshot
// (shardingItemParameters, parsed once when the config was decoded); ""
// when it has none.
func (r *Run) ItemParameter(item int) string { return r.params[item] }

// ReportError records msg as this server's lastError in the job's status
// (empty msg clears it), for an error the run goes on from (a source
// backing off a failing statement). The next Begin clears it.
func (r *Run) ReportError(ctx context.Context, msg string) { r.j.recordLastError(ctx, msg) }

// Complete ends the run in one transaction: for a normal run the server's
// run record gets the completion time and next (zero next: none) and the
// live marker is removed; for a failover run each item's running node and
// claim are removed and its lastCompleteTime and failover mark written.
// While the run's session is suspended it waits, within ctx, for the
// session to resume; if ctx ends first it returns ErrSessionLost and the
// Job writes the completion when the same session resumes (so the marker
// never outlives the run). A
// lost session's nodes are gone with it (ErrSessionLost). Items pruned
// beyond a lowered total meanwhile are skipped.
func (r *Run) Complete(ctx context.Context, next time.Time) error {
	return r.CompleteWith(ctx, next, RunOutcome{})
}

// RunOutcome is what a run's Complete records besides its completion.
type RunOutcome struct {
	// Errors maps each item of the run whose run ended in an error (a
	// failed fetch or commit, a timeout, a panic, a lost connection) to
	// the error's text; the run's other items succeeded. Texts longer than
	// 4 KiB keep their first KiB and their end, where the cause is.
	Errors map[int]string
	// Counts, when not nil, are the interval counts reported with the
	// completion; CompleteWith sets Counts.Written when they were written
	// (when not, report them again later: nothing is lost).
	Counts *CountReport
}

// CountReport is one report of a server's interval counts.
type CountReport struct {
	Success, Failure int64
	// Written is set once the counts are in the store.
	Written bool
}

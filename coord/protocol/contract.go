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

// THIS FILE IS THE CONTRACT between the protocol and its callers (dataflow, stats,
// cmd/shardflow). The signatures below are fixed; the bodies are filled in by
// the coord implementation files. Additive changes are fine; changing a
// signature means updating every caller in the same commit.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// Sentinel errors of the protocol.
var (
	// ErrServerIDInUse: another live process registered the same server id
	// for this job. Give each process its own ServerID (e.g. the pod name).
	ErrServerIDInUse = errors.New("coord: server id already registered by a live process for this job; give each process its own server id")
	// ErrSessionLost: the store session is lost; no run may start or commit.
	ErrSessionLost = errors.New("coord: coordination session lost; runs are cancelled until a new session is registered")
	// ErrNotOwner: a fencing check found that this run no longer owns the item
	// (resharded, failed over, or the session was lost). Do not commit.
	ErrNotOwner = errors.New("coord: shard item no longer owned by this run; discard its uncommitted work")
	// ErrItemsRunning: Begin found an item of this server still running; the
	// items were flagged misfire (when enabled) and no run starts.
	ErrItemsRunning = errors.New("coord: shard items still running; trigger recorded as misfire")
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

// NewRegistry returns a Registry over st. It does not own st: closing the
// Registry leaves st open.
func NewRegistry(st store.Store, cfg RegistryConfig) (*Registry, error) {
	return newRegistry(st, cfg)
}

// ServerID returns the effective server id.
func (r *Registry) ServerID() string { return r.serverID() }

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
	return r.join(ctx, cfg)
}

// Close leaves every joined job and stops the Registry's goroutines. It
// waits for them; ctx bounds the wait. Safe to call twice. The jobs leave
// side by side, each as its Leave would, their store writes shared: the
// offline operations of many jobs go in a few transactions (each job's
// together in one), so closing a Registry of thousands of jobs takes a few
// store round trips, not one per job.
func (r *Registry) Close(ctx context.Context) error { return r.close(ctx) }

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
)

// Name returns the job name.
func (j *Job) Name() string { return j.name() }

// Config returns the effective config as currently stored.
func (j *Job) Config() jobconfig.Config { return j.config() }

// Signals returns the job's notification channel. Each kind of signal is
// coalesced (at most one pending); it is closed after Leave. The first call
// starts a goroutine (until Leave) that sends on it; a host of many jobs
// uses OnSignal instead.
func (j *Job) Signals() <-chan Signal { return j.signals() }

// OnSignal delivers the job's signals by calling f instead of through
// Signals, so a host of many jobs needs no goroutine per job to receive
// them. f is called by the job's watcher, on a goroutine of the Registry's
// event loop (never two calls for one job at once), one signal at a time,
// for every kind coalesced as on Signals (pending ones at once); it must
// not block, nor call Leave or Registry.Close or wait for anything that
// does (start a goroutine for that): it would hold up other jobs' watchers.
// Call it once, right after Join; Signals then delivers nothing.
func (j *Job) OnSignal(f func(Signal)) { j.onSignal(f) }

// Begin starts a run at local time now: checks the clock, reshards first if
// this server leads and the flag is set (otherwise waits for the leader),
// computes this server's items (failover items first; disabled items and
// items failed over to others dropped), and marks them running in one
// transaction. A run with no items is valid (Shards is empty).
//
// Errors: ErrItemsRunning (misfire recorded), ErrPaused, ErrShutdown,
// ErrClockSkew, ErrSessionLost, ErrBadConfig, ctx.Err().
func (j *Job) Begin(ctx context.Context, now time.Time) (*Run, error) {
	return j.begin(ctx, now)
}

// TakeMisfire reports whether a catch-up run is due: misfire is on, no
// resharding is pending, and one of this server's items is flagged misfire.
// The flags are cleared. Called after Complete.
func (j *Job) TakeMisfire(ctx context.Context) (bool, error) { return j.takeMisfire(ctx) }

// ClaimFailover claims one waiting failover item if failover is on and the
// queue is not empty (under the failover latch; when another server holds
// it, it waits up to a second for its release). True means an item is now
// assigned to this server and the Node should run at once.
func (j *Job) ClaimFailover(ctx context.Context) (bool, error) { return j.claimFailover(ctx) }

// RecordNextFireTime writes execution/{item}/nextFireTime for this server's items.
func (j *Job) RecordNextFireTime(ctx context.Context, next time.Time) error {
	return j.recordNextFireTime(ctx, next)
}

// ReportCounts writes the last interval's counts to
// servers/{id}/processSuccessCount and processFailureCount (one transaction).
func (j *Job) ReportCounts(ctx context.Context, success, failure int64) error {
	return j.reportCounts(ctx, success, failure)
}

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
	return j.once(ctx, phase, items, timeout, fn)
}

// Lost returns a channel closed when this job's current registration is lost
// (session lost); Job re-registers by itself on the next session, after
// which Lost returns a new channel.
func (j *Job) Lost() <-chan struct{} { return j.lost() }

// Leave unregisters this server from the job (its server node goes offline,
// resharding is flagged) and closes Signals.
func (j *Job) Leave(ctx context.Context) error { return j.leave(ctx) }

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

// Shards returns the run's items, failover items first.
func (r *Run) Shards() []Assignment { return r.shards() }

// Config returns the config snapshot the run began on: Begin took it once,
// computed the run's items with its ShardingTotalCount, and the run's
// pipeline uses it whole. A config edit during the run applies to the next
// run (Job.Config returns it already).
func (r *Run) Config() jobconfig.Config { return r.cfg }

// Once is Job.Once for this run: its items, and the set counted on the
// run's config snapshot, so a config edit during the run cannot change the
// set the servers' runs complete.
func (r *Run) Once(ctx context.Context, phase string, timeout time.Duration, fn func(context.Context) error) error {
	return r.once(ctx, phase, timeout, fn)
}

// ItemParameter returns item's parameter from the run's config snapshot
// (shardingItemParameters, parsed once when the config was decoded); ""
// when it has none.
func (r *Run) ItemParameter(item int) string { return r.params[item] }

// Context is cancelled when the run loses ownership: session lost, job
// shut down or removed, or the ctx given to Begin ends.
func (r *Run) Context() context.Context { return r.context() }

// KeepGoing is the check between streaming batches: false when paused,
// resharding is pending, the job is stopping, or ownership is lost.
func (r *Run) KeepGoing() bool { return r.keepGoing() }

// CheckOwnership is the fencing check for commits: it syncs with the store
// and returns nil only if this run still owns item with the same epoch on a
// live session. Otherwise ErrNotOwner (or ErrSessionLost).
func (r *Run) CheckOwnership(ctx context.Context, item int) error {
	return r.checkOwnership(ctx, item)
}

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
	return r.complete(ctx, next, RunOutcome{})
}

// CompleteWith is Complete recording the run's outcome with the
// completion, in the same transaction: the failing items (status shows
// each with its count of consecutive failed runs, since when, and its last
// error; JobStatus.Health is not "ok" while one fails) and, when
// out.Counts is set, the interval counts (as Job.ReportCounts writes
// them). Complete is CompleteWith an outcome of no error and no counts.
// Only the first call of a run records its outcome; a retry after an error
// writes the same.
func (r *Run) CompleteWith(ctx context.Context, next time.Time, out RunOutcome) error {
	return r.complete(ctx, next, out)
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

package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/startstop"
)

// Reason says why a run started.
type Reason int

// Run reasons.
const (
	// ReasonCron: the job's cron schedule fired.
	ReasonCron Reason = iota + 1
	// ReasonTrigger: Node.TriggerLocal, Node.TriggerAll or an operator's trigger.
	ReasonTrigger
	// ReasonMisfire: the catch-up run after triggers missed during a run.
	ReasonMisfire
	// ReasonFailover: this server claimed a crashed server's item.
	ReasonFailover
)

// reasonClaim starts a runner on a failover request while the job is
// idle: it claims an item first and runs ReasonFailover only if it got one.
// Internal: runs never see it.
const reasonClaim Reason = -1

// reasonKick is a run of a job in a workflow that looks for items its
// open workflow runs owe this server (dataflow/workflow.go's kick): it
// never starts a workflow run. Runs see ReasonTrigger.
const reasonKick Reason = -2

// String names the reason.
func (r Reason) String() string {
	switch r {
	case ReasonCron:
		return "cron"
	case ReasonTrigger:
		return "trigger"
	case ReasonMisfire:
		return "misfire"
	case ReasonFailover:
		return "failover"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// jobRuns is a job as the scheduler runs it: one run, and the
// coordination's two answers that decide follow-up runs (followUp). ctx is
// the job's run context: it is cancelled by a hard stop, by a remove that
// timed out, and by a graceful stop that timed out. The scheduler calls
// them from the job's runner goroutines only.
type jobRuns interface {
	// run performs one run; scheduled is the cron fire time it serves
	// (ReasonCron; zero for the others).
	run(ctx context.Context, reason Reason, scheduled time.Time)
	// takeMisfire reports whether the coordination flagged a catch-up run
	// of this server's items (and clears the flags).
	takeMisfire(ctx context.Context) bool
	// claimFailover claims one item waiting in the failover queue; true:
	// it is this server's now and a failover run is due.
	claimFailover(ctx context.Context) bool
}

// scheduler is the one cron scheduler of a Node: one cronLoop (one
// goroutine and timer over the jobs' robfig/cron schedules) for every job,
// and at most one run per job at a time.
//
// A job costs no goroutine while idle: its runner is started when a run is
// due, on a starter goroutine (runStarts), and ends when no run is pending. A cron fire during a run sets
// the job's misfire flag (when misfire is on), so any number of fires during
// one run give exactly one catch-up run after it; a manual trigger during a
// run is queued (one pending) and never dropped.
//
// All methods are safe for concurrent use.
type scheduler struct {
	cron   *cronLoop[*schedJob]
	logger *slog.Logger

	// life is start once and stop once (StopFunc). The scheduler has no
	// goroutine of its own: stop waits for cron's loop and the runners.
	// Taken under mu, never the other way round.
	life    startstop.BaseStartStop
	stopErr error // the first stop's; read after life.StopFunc returns

	base   context.Context // parent of every job's run context
	cancel context.CancelFunc

	mu   sync.Mutex
	jobs map[string]*schedJob
	// specs are the parsed cron specs of the jobs, shared by the jobs with
	// the same one: the cron loop computes a shared schedule's next fire
	// time once for all of them.
	specs  map[string]*sharedSpec
	active map[*schedJob]struct{} // jobs with a runner queued or running, removed ones too
	// stopping is set under mu by stop's first call: every decision to
	// start a runner reads it together with the job's state.
	stopping bool

	starts runStarts
}

type schedJob struct {
	name    string
	runs    jobRuns
	misfire bool
	spec    string
	sched   *cronSchedule         // nil: trigger only
	entry   *cronEntry[*schedJob] // nil: not scheduled

	ctx    context.Context
	cancel context.CancelFunc

	// Guarded by scheduler.mu.
	removed        bool
	pendingMisfire bool
	pendingTrigger bool
	// pendingKick: a kick came during a run; it runs after it (a kick
	// dropped waited for the next reconcile tick).
	pendingKick bool
	// pendingFailover: failover items were signalled while a failover
	// runner beside the run was claiming: it claims again before it exits.
	pendingFailover bool
	idle            chan struct{} // non-nil while a runner is queued or running; closed when it ends
	// failoverIdle is non-nil while failover runners beside the run in
	// progress exist; closed when the last one exits.
	failoverIdle chan struct{}
	// failoverRunners counts the failover runners; failoverClaiming
	// those of them claiming (not in a run).
	failoverRunners, failoverClaiming int
}

// sharedSpec is a parsed cron spec and the number of jobs on it.
type sharedSpec struct {
	sched *cronSchedule
	jobs  int
}

func newScheduler(logger *slog.Logger) *scheduler {
	base, cancel := context.WithCancel(context.Background())
	s := &scheduler{
		logger: logger,
		base:   base,
		cancel: cancel,
		jobs:   map[string]*schedJob{},
		specs:  map[string]*sharedSpec{},
		active: map[*schedJob]struct{}{},
	}
	s.cron = newCronLoop(func(at time.Time, due []*schedJob) { s.fire(at, due...) })
	return s
}

// shareSpecLocked returns the schedule of spec shared by the jobs on it,
// parsed is spec's (nil for ""): the first job on spec brings it.
func (s *scheduler) shareSpecLocked(spec string, parsed cron.Schedule) *cronSchedule {
	if parsed == nil {
		return nil
	}
	sh := s.specs[spec]
	if sh == nil {
		sh = &sharedSpec{sched: newCronSchedule(parsed)}
		s.specs[spec] = sh
	}
	sh.jobs++
	return sh.sched
}

// releaseSpecLocked is a job leaving spec.
func (s *scheduler) releaseSpecLocked(spec string) {
	if sh := s.specs[spec]; sh != nil {
		if sh.jobs--; sh.jobs == 0 {
			delete(s.specs, spec)
		}
	}
}

// parseSpec parses a cron spec; "" means trigger-only (nil schedule).
func parseSpec(spec string) (cron.Schedule, error) {
	if spec == "" {
		return nil, nil
	}
	s, err := jobconfig.ParseCron(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCron, err)
	}
	return s, nil
}

// start starts the cron loop. Jobs added before start fire only after it.
// A second start, or one after stop, does nothing.
func (s *scheduler) start() {
	// Under mu, so that a stop beside it stops a cron loop already started.
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok, started, _ := s.life.StartInit(context.Background())
	if !ok {
		return
	}
	s.cron.start()
	started()
}

// add schedules a job. spec "" makes it trigger-only.
func (s *scheduler) add(name, spec string, misfire bool, runs jobRuns) error {
	sched, err := parseSpec(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrNodeStopped
	}
	if _, ok := s.jobs[name]; ok {
		return fmt.Errorf("%w: %q", ErrJobExists, name)
	}
	j := &schedJob{name: name, runs: runs, misfire: misfire, spec: spec, sched: s.shareSpecLocked(spec, sched)}
	j.ctx, j.cancel = context.WithCancel(s.base)
	if j.sched != nil {
		j.entry = s.cron.add(j.sched, j)
	}
	s.jobs[name] = j
	return nil
}

// reschedule replaces a job's cron spec and misfire setting.
func (s *scheduler) reschedule(name, spec string, misfire bool) error {
	sched, err := parseSpec(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoJob, name)
	}
	j.misfire = misfire
	if spec == j.spec {
		return nil
	}
	if j.entry != nil {
		s.cron.remove(j.entry)
		j.entry = nil
	}
	s.releaseSpecLocked(j.spec)
	j.spec, j.sched = spec, s.shareSpecLocked(spec, sched)
	if j.sched != nil {
		j.entry = s.cron.add(j.sched, j)
	}
	return nil
}

// nextFire returns the job's next cron fire time after now; zero for a
// trigger-only job or an unknown one.
func (s *scheduler) nextFire(name string, now time.Time) time.Time {
	s.mu.Lock()
	var sched *cronSchedule
	if j, ok := s.jobs[name]; ok {
		sched = j.sched
	}
	s.mu.Unlock()
	if sched == nil {
		return time.Time{}
	}
	return s.cron.nextAfter(sched, now)
}

// fireChunk bounds the jobs fire starts under one hold of mu: a runner
// ending beside thousands of fires waits for one chunk, not for all.
const fireChunk = 256

// fire is the cron loop's callback with the jobs due at one instant, at:
// for each, start a run of that fire, or record a misfire if one runs.
func (s *scheduler) fire(at time.Time, due ...*schedJob) {
	for len(due) > 0 {
		chunk := due[:min(len(due), fireChunk)]
		due = due[len(chunk):]
		s.mu.Lock()
		for _, j := range chunk {
			switch {
			case j.removed || s.stopping:
			case j.idle != nil:
				if j.misfire {
					j.pendingMisfire = true
				}
			default:
				s.startRunnerLocked(j, ReasonCron, at)
			}
		}
		s.mu.Unlock()
	}
}

// trigger asks for a run now, or queues one if a run is in progress.
func (s *scheduler) trigger(name string, reason Reason) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrNodeStopped
	}
	j, ok := s.jobs[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoJob, name)
	}
	if j.idle != nil {
		j.pendingTrigger = true
		return nil
	}
	s.startRunnerLocked(j, reason, time.Time{})
	return nil
}

// kick starts a reasonKick run if the job is idle, else queues one for
// after the run in progress: that run may have planned before the items
// the kick is for (a reshard's) were this server's.
func (s *scheduler) kick(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok || s.stopping || j.removed {
		return
	}
	if j.idle != nil {
		j.pendingKick = true
		return
	}
	s.startRunnerLocked(j, reasonKick, time.Time{})
}

// failover asks for a failover run (ReasonFailover): at once if the job
// is idle; during a run, at once too, by a failover runner beside it:
// failover items are other servers' items, and coord's running nodes keep
// to one run per item, so a crashed server's items need not wait for this
// server's run in progress. A request while a failover runner is claiming
// makes it claim again before it exits; a request while every failover
// runner is in its run starts another one, so that a crashed server's
// next item is claimed at once, not when one of this server's runs ends
// (the failover benchmark's busy survivors: 0.3-1 s later).
func (s *scheduler) failover(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok || s.stopping || j.removed {
		return
	}
	if j.failoverClaiming > 0 {
		j.pendingFailover = true
		return
	}
	if j.idle == nil {
		s.startRunnerLocked(j, reasonClaim, time.Time{})
		return
	}
	s.startFailoverRunnerLocked(j)
}

func (s *scheduler) startFailoverRunnerLocked(j *schedJob) {
	if j.failoverIdle == nil {
		j.failoverIdle = make(chan struct{})
	}
	j.failoverRunners++
	j.failoverClaiming++
	s.active[j] = struct{}{}
	go s.failoverRunner(j)
}

// failoverRunner runs failover items beside the job's run in progress
// for as long as followUp says. Owned by the scheduler like runner: stop
// and remove wait for it through j.failoverIdle.
func (s *scheduler) failoverRunner(j *schedJob) {
	for reason := s.followUp(j, true); reason != 0; reason = s.followUp(j, true) {
		j.runs.run(j.ctx, reason, time.Time{})
		s.mu.Lock()
		j.failoverClaiming++
		s.mu.Unlock()
	}
}

// startRunnerLocked starts j's runner with a run for reason; scheduled is
// the cron fire time it serves (zero but for ReasonCron). The runner runs
// on one of the scheduler's starter goroutines (runStarts).
func (s *scheduler) startRunnerLocked(j *schedJob, reason Reason, scheduled time.Time) {
	j.idle = make(chan struct{})
	s.active[j] = struct{}{}
	if s.starts.push(runStart{j: j, reason: reason, scheduled: scheduled}) {
		s.startStarter()
	}
}

func (s *scheduler) startStarter() {
	s.starts.goroutines.Add(1)
	go s.starter()
}

// starter runs the runners queued in s.starts, one after another, until
// none is queued: a starter that finds its first one taken exits at once.
func (s *scheduler) starter() {
	defer s.starts.goroutines.Done()
	for first := true; ; first = false {
		rs, ok, start := s.starts.take(first)
		if !ok {
			return
		}
		if start {
			s.startStarter() // for the runners queued behind this one
		}
		s.runner(rs.j, rs.reason, rs.scheduled)
	}
}

// runner runs the job, then the follow-up runs followUp decides, until
// there is none. It is owned by the scheduler: stop and remove wait for it
// through j.idle.
func (s *scheduler) runner(j *schedJob, reason Reason, scheduled time.Time) {
	if reason == reasonClaim {
		reason = 0
		if s.live(j) && j.runs.claimFailover(j.ctx) {
			reason = ReasonFailover
		}
	}
	for {
		if reason != 0 {
			j.runs.run(j.ctx, reason, scheduled)
		}
		// Follow-up runs serve no fire time of their own (a catch-up
		// serves the fires it collapsed).
		scheduled = time.Time{}
		if reason = s.followUp(j, false); reason == 0 {
			return
		}
	}
}

// live reports whether j may still run: not removed, the scheduler not
// stopping, its run context not ended.
func (s *scheduler) live(j *schedJob) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !j.removed && !s.stopping && j.ctx.Err() == nil
}

// followUp is the one place that decides the run after a run (or after
// a failover request) on one of j's runners, in this order:
//
//   - none once j is removed, the scheduler stops or the run context ends;
//   - beside a run in progress (a failover runner): a failover item it
//     claimed (ReasonFailover); else, if a failover request came while it
//     was claiming, one more claim; else none - the run in progress does
//     the rest;
//   - the catch-up run the coordination flagged (ReasonMisfire: an earlier
//     trigger found items still running);
//   - a failover item it claimed (ReasonFailover);
//   - a trigger queued during the run (ReasonTrigger), else a cron fire
//     missed during it (ReasonMisfire): one run serves both, so both are
//     consumed; any number of missed fires gives exactly one catch-up run;
//   - else a kick queued during the run (reasonKick).
//
// When it decides none, the runner is gone from j before s.mu is released,
// so a request arriving after the decision starts a new runner.
func (s *scheduler) followUp(j *schedJob, beside bool) Reason {
	for {
		if s.live(j) {
			if beside {
				if j.runs.claimFailover(j.ctx) {
					s.mu.Lock()
					j.failoverClaiming--
					if j.pendingFailover && j.failoverClaiming == 0 && !j.removed && !s.stopping {
						// A request came during the claim: more items
						// may wait, and this runner goes to its run.
						j.pendingFailover = false
						s.startFailoverRunnerLocked(j)
					}
					s.mu.Unlock()
					return ReasonFailover
				}
			} else {
				if j.runs.takeMisfire(j.ctx) {
					return ReasonMisfire
				}
				if j.runs.claimFailover(j.ctx) {
					return ReasonFailover
				}
			}
		}
		s.mu.Lock()
		live := !j.removed && !s.stopping && j.ctx.Err() == nil
		if beside {
			again := live && j.pendingFailover
			j.pendingFailover = false
			if again {
				s.mu.Unlock()
				continue
			}
			j.failoverClaiming--
			if j.failoverRunners--; j.failoverRunners == 0 {
				close(j.failoverIdle)
				j.failoverIdle = nil
				if j.idle == nil {
					delete(s.active, j)
				}
			}
			s.mu.Unlock()
			return 0
		}
		var next Reason
		switch {
		case !live:
		case j.pendingTrigger:
			next = ReasonTrigger
		case j.pendingMisfire:
			next = ReasonMisfire
		case j.pendingKick:
			next = reasonKick
		}
		j.pendingTrigger, j.pendingMisfire = false, false
		if next == reasonKick || !live {
			j.pendingKick = false
		}
		if next == 0 {
			close(j.idle)
			j.idle = nil
			if j.failoverIdle == nil {
				delete(s.active, j)
			}
		}
		s.mu.Unlock()
		return next
	}
}

// remove unschedules a job and waits for its run to finish. If ctx ends
// first, the run's context is cancelled, the cancelled run is waited for,
// and ctx.Err() returned.
func (s *scheduler) remove(ctx context.Context, name string) error {
	s.mu.Lock()
	j, ok := s.jobs[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNoJob, name)
	}
	delete(s.jobs, name)
	j.removed = true
	if j.entry != nil {
		s.cron.remove(j.entry) // O(log jobs)
	}
	s.releaseSpecLocked(j.spec)
	idles := []chan struct{}{j.idle, j.failoverIdle}
	s.mu.Unlock()

	defer j.cancel()
	var err error
	for _, idle := range idles {
		if idle == nil {
			continue
		}
		select {
		case <-idle:
		case <-ctx.Done():
			j.cancel()
			<-idle
			err = ctx.Err()
		}
	}
	return err
}

// cancelRuns cancels the contexts of every run, in progress or to come
// (a stop in flight escalated to a hard one). Safe at any time.
func (s *scheduler) cancelRuns() { s.cancel() }

// stop stops scheduling (no new cron fires, no pending runs) and waits for
// the runs in progress; hard cancels their contexts first. If ctx ends
// first it returns ctx.Err() with every run's context cancelled: a graceful
// stop then waits for the cancelled runs, so that nothing outlives it; a
// hard one, whose runs were cancelled from the start, does not wait past
// ctx. Safe before start and more than once (a later call waits for the
// first and returns nil).
func (s *scheduler) stop(ctx context.Context, hard bool) error {
	if !s.life.StopFunc(func(started bool) { s.stopErr = s.halt(ctx, started, hard) }) {
		return nil
	}
	return s.stopErr
}

// halt is the first stop's work.
func (s *scheduler) halt(ctx context.Context, started, hard bool) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if started {
		// Waits for a cron callback in flight (it takes mu briefly).
		s.cron.stop()
	}
	if hard {
		s.cancel()
	}
	err := s.wait(ctx)
	s.cancel()
	if err != nil && !hard {
		_ = s.wait(context.Background())
	}
	return err
}

// wait blocks until no runner nor starter goroutine is left or ctx ends.
func (s *scheduler) wait(ctx context.Context) error {
	for {
		s.mu.Lock()
		var idle chan struct{}
		for j := range s.active {
			if idle = j.idle; idle == nil {
				idle = j.failoverIdle
			}
			break
		}
		s.mu.Unlock()
		if idle == nil {
			// No runner is queued: the starters left find none and exit.
			s.starts.goroutines.Wait()
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// names returns the scheduled jobs' names, unsorted.
func (s *scheduler) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.jobs))
	for n := range s.jobs {
		out = append(out, n)
	}
	return out
}

package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// A workflow run's nodes, under each job of it (workflow/...):
//
//	seq            the first job's: the number of its last workflow run
//	open/{W}       while the job's step of run W runs (started, not decided)
//	runs/{W}       the step: its Step record (JSON), created for every job
//	               of W when W starts (pending), so that every decision on
//	               it is a versioned write
//	runs/{W}/items/{i}  item i completed in W, recorded after a run of it
//	               finished it; its data is the item's error text (""
//	               when it succeeded)
//
// Every decision is one transaction fenced by versions: an item's
// completion and the step's count together; a step decided, the open node
// deleted and every step after it that this decides (started, with its
// servers' trigger nodes, or stopped) in the same transaction, checking
// the versions of the other upstream steps it read. Two servers completing
// the last items of two upstream steps at once, or a server dying at any
// point, start a dependent step exactly once.
const (
	nSeq   = "seq"
	nOpen  = "open"
	nRuns  = "runs"
	nItems = "items"
)

// Step states.
const (
	// StatePending: the step waits for its upstream steps.
	StatePending = "pending"
	// StateRunning: its servers run its items.
	StateRunning = "running"
	// StateSucceeded: every item completed without an error.
	StateSucceeded = "succeeded"
	// StateFailed: every item completed, at least one with an error.
	StateFailed = "failed"
	// StateStopped: an upstream step failed or stopped, and the job's
	// upstreamFailure policy is stop: it does not run in this workflow run.
	StateStopped = "stopped"
	// StateRemoved: the step's job was removed from the namespace (status
	// shows it; the steps after it take it as stopped).
	StateRemoved = "removed"
)

// Step is one job's step of one workflow run, as stored in runs/{W}.
type Step struct {
	// Run is the workflow run's id, "{first job}-{number}".
	Run string `json:"run"`
	// Job is the step's job.
	Job string `json:"job"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Total is the number of shard items the step runs (the job's
	// shardingTotalCount when the step started).
	Total int `json:"total,omitempty"`
	// Completed and Failed count the items completed so far, and those of
	// them that failed.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Upstreams are the jobs the step waits for (the job's dependsOn when
	// the workflow run started); none for the first job.
	Upstreams []string `json:"upstreams,omitempty"`
	// RunOnFailure is the job's upstreamFailure policy "run", as it was
	// when the workflow run started.
	RunOnFailure bool `json:"runOnFailure,omitempty"`
	// Jobs, on the first job's step only, are every job of the workflow
	// run, the first job first.
	Jobs []string `json:"jobs,omitempty"`
	// Created, Started and Ended are when the workflow run started, the
	// step started running, and it was decided (Unix milliseconds).
	Created int64 `json:"created"`
	Started int64 `json:"started,omitempty"`
	Ended   int64 `json:"ended,omitempty"`
}

// Decided reports whether the step will not run any more in its workflow run.
func (s Step) Decided() bool {
	switch s.State {
	case StateSucceeded, StateFailed, StateStopped, StateSkipped, StateCancelled:
		return true
	}
	return false
}

// RunID is the id of the first job's n-th workflow run.
func RunID(first string, n int64) string { return fmt.Sprintf("%s-%010d", first, n) }

// ParseRunID splits a workflow run id into its first job and number.
func ParseRunID(id string) (first string, n int64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return id[:i], n, true
}

// Steps is one job's view of its workflow runs, as the servers running it
// use it: which run a run of the job serves (Pick) and the record of its
// items' completions (Record). Safe for concurrent use.
type Steps struct {
	st  store.Store
	ns  string
	job string
	// Now is the clock of the records; time.Now when nil.
	Now func() time.Time
}

// ForJob returns job's Steps in namespace ns over st.
func ForJob(st store.Store, ns, job string) *Steps {
	return &Steps{st: st, ns: ns, job: job}
}

func (s *Steps) now() int64 {
	if s.Now != nil {
		return s.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

func (s *Steps) path(rel ...string) string {
	return jobPath(s.ns, s.job, append([]string{nWorkflow}, rel...)...)
}

func stepPath(ns, job, run string) string { return jobPath(ns, job, nWorkflow, nRuns, run) }

// maxAttempts bounds the replans of a decision whose fenced transaction
// lost to a concurrent one.
const maxAttempts = 50

// errReplan: a fenced transaction lost to a concurrent writer; read again.
var errReplan = errors.New("workflow: concurrent writer; plan again")

// lostRace reports whether a Multi failed because the state it was
// planned on changed.
func lostRace(err error) bool {
	return errors.Is(err, store.ErrBadVersion) || errors.Is(err, store.ErrNodeExists) || errors.Is(err, store.ErrNoNode)
}

// Open returns the workflow runs in which the job's step runs (started,
// not decided), oldest first.
func (s *Steps) Open(ctx context.Context) ([]string, error) {
	names, _, err := s.st.Children(ctx, s.path(nOpen))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", s.path(nOpen), err)
	}
	slices.SortFunc(names, compareRuns)
	return names, nil
}

// compareRuns orders run ids by number, then by first job.
func compareRuns(a, b string) int {
	fa, na, _ := ParseRunID(a)
	fb, nb, _ := ParseRunID(b)
	if na != nb {
		if na < nb {
			return -1
		}
		return 1
	}
	return strings.Compare(fa, fb)
}

// ReadStep reads job's step of workflow run run, with the node's version.
func ReadStep(ctx context.Context, st store.Store, ns, job, run string) (Step, int32, error) {
	data, stat, err := st.Get(ctx, stepPath(ns, job, run))
	if err != nil {
		return Step{}, 0, fmt.Errorf("workflow: read %s: %w", stepPath(ns, job, run), err)
	}
	var step Step
	if err := json.Unmarshal(data, &step); err != nil {
		return Step{}, 0, fmt.Errorf("workflow: decode %s: %w", stepPath(ns, job, run), err)
	}
	return step, stat.Version, nil
}

func encode(step Step) []byte {
	b, _ := json.Marshal(step) // a Step always encodes
	return b
}

// completedItems lists the items completed in job's step of run.
func completedItems(ctx context.Context, st store.Store, ns, job, run string) (map[int]bool, error) {
	p := store.Join(stepPath(ns, job, run), nItems)
	names, _, err := st.Children(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", p, err)
	}
	out := make(map[int]bool, len(names))
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			out[i] = true
		}
	}
	return out, nil
}

// Assignment is what a run of the job does for its workflow runs.
type Assignment struct {
	// Run is the workflow run the run serves; "" when the job is in no
	// workflow (it runs as a job on its own).
	Run string
	// Items are the run's items to run in Run: those not completed in it
	// yet. For a job in a workflow, no other item of the run may run.
	Items []int
}

// Pick decides what a run of the job owning items does: the oldest
// workflow run whose step of this job runs and has one of items not
// completed yet, for those items; else, for a first job (dependsOn empty)
// that jobs depend on (first: see First), a new workflow run, for
// every one of items; else nothing (Run "": a first job without
// dependents runs all its items as usual; a dependent job runs none).
// total is the run's shardingTotalCount, the new step's total.
//
// A run serves one workflow run: the oldest one its items owe. A run of
// an item cut by a crash (its failover run, or its owner's next run)
// serves the workflow run the cut run served, since the item is not
// completed there and that run is the oldest its items owe.
func (s *Steps) Pick(ctx context.Context, items []int, dependsOn []string, first bool, total int) (Assignment, error) {
	return s.pick(ctx, items, dependsOn, first, total, 0)
}

// PickTriggered is Pick for a first job's fire by an operator trigger
// whose node the store created at zxid trigger (protocol.Job.LastTrigger):
// when its last workflow run started after that (another server's fire of
// the same trigger started it, and this server's items are completed
// there: moved to others, or this server took the trigger late, after a
// restart), the fire was answered and starts none.
func (s *Steps) PickTriggered(ctx context.Context, items []int, total int, trigger int64) (Assignment, error) {
	return s.pick(ctx, items, nil, true, total, trigger)
}

func (s *Steps) pick(ctx context.Context, items []int, dependsOn []string, first bool, total int, trigger int64) (a Assignment, err error) {
	if len(items) == 0 {
		return Assignment{}, nil
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		// The run counter is read before the open runs: the start below
		// is fenced by its version, so a workflow run started by another
		// server after the list was read fails it, and this Pick plans
		// again and serves that run (read after the list, the counter
		// would let it start the next one beside it).
		var seq counter
		if first && len(dependsOn) == 0 {
			if seq, err = s.readSeq(ctx); err != nil {
				return Assignment{}, err
			}
		}
		open, err := s.Open(ctx)
		if err != nil {
			return Assignment{}, err
		}
		for _, run := range open {
			todo, err := s.owed(ctx, run, items)
			if err != nil {
				return a, err
			}
			if len(todo) > 0 {
				a.Run, a.Items = run, todo
				return a, nil
			}
		}
		if len(dependsOn) > 0 || !first {
			return a, nil
		}
		if answered, err := s.answered(ctx, seq, trigger); answered || err != nil {
			return a, err
		}
		run, err := s.start(ctx, seq, total)
		if errors.Is(err, errReplan) {
			continue
		}
		if err != nil {
			return Assignment{}, err
		}
		a.Run = run
		for _, i := range items {
			if i < total {
				a.Items = append(a.Items, i)
			}
		}
		return a, nil
	}
	return Assignment{}, fmt.Errorf("workflow: job %s: no decision on its workflow run after %d attempts (concurrent writers)", s.job, maxAttempts)
}

// owed returns those of items that the job's step of workflow run run
// owes (none when the step is not running or gone): those not recorded
// completed there. An item whose run was cut before it recorded the item
// (a crash, a lost session) is owed still: it runs again in run.
func (s *Steps) owed(ctx context.Context, run string, items []int) (todo []int, err error) {
	step, _, err := ReadStep(ctx, s.st, s.ns, s.job, run)
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil // pruned meanwhile
	}
	if err != nil || step.State != StateRunning {
		return nil, err
	}
	done, err := completedItems(ctx, s.st, s.ns, s.job, run)
	if err != nil {
		return nil, err
	}
	for _, i := range items {
		if i < step.Total && !done[i] {
			todo = append(todo, i)
		}
	}
	return todo, nil
}

// First reports whether the job starts workflow runs: it depends on
// nothing and jobs depend on it.
func (s *Steps) First(ctx context.Context, dependsOn []string) (bool, error) {
	if len(dependsOn) > 0 {
		return false, nil
	}
	ds, err := dependents(ctx, s.st, s.ns, s.job)
	return len(ds) > 0, err
}

// counter is the first job's run counter as read: the number of its last
// workflow run and the node's version (exists false: not created yet).
type counter struct {
	last    int64
	version int32
	exists  bool
}

// readSeq reads the job's run counter.
func (s *Steps) readSeq(ctx context.Context) (counter, error) {
	data, stat, err := s.st.Get(ctx, s.path(nSeq))
	if errors.Is(err, store.ErrNoNode) {
		return counter{}, nil
	}
	if err != nil {
		return counter{}, fmt.Errorf("workflow: read %s: %w", s.path(nSeq), err)
	}
	last, _ := strconv.ParseInt(string(data), 10, 64)
	return counter{last: last, version: stat.Version, exists: true}, nil
}

// answered reports whether the job's last workflow run (seq's) started
// after the trigger node of Czxid trigger was written (trigger 0: no such
// trigger: false).
func (s *Steps) answered(ctx context.Context, seq counter, trigger int64) (bool, error) {
	if trigger <= 0 || seq.last <= 0 {
		return false, nil
	}
	p := stepPath(s.ns, s.job, RunID(s.job, seq.last))
	ok, st, err := s.st.Exists(ctx, p)
	if err != nil {
		return false, fmt.Errorf("workflow: read %s: %w", p, err)
	}
	return ok && st.Czxid > trigger, nil
}

// start starts the job's next workflow run after seq (the counter as its
// caller read it): its step running with total items, every job after it
// pending, in one transaction fenced by the counter's version (errReplan:
// another server started one since seq was read).
func (s *Steps) start(ctx context.Context, seq counter, total int) (string, error) {
	seqPath := s.path(nSeq)
	if !seq.exists {
		if err := store.CreateAll(ctx, s.st, store.Parent(seqPath)); err != nil {
			return "", fmt.Errorf("workflow: create %s: %w", store.Parent(seqPath), err)
		}
		if _, err := s.st.Create(ctx, seqPath, []byte("0"), store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return "", fmt.Errorf("workflow: create %s: %w", seqPath, err)
		}
		return "", errReplan
	}
	last := seq.last
	run := RunID(s.job, last+1)

	// Every job after this one, each with its dependsOn and policy now.
	jobs := []string{s.job}
	ups := map[string][]string{}
	runOnFailure := map[string]bool{}
	for i := 0; i < len(jobs); i++ {
		ds, err := dependents(ctx, s.st, s.ns, jobs[i])
		if err != nil {
			return "", err
		}
		for _, d := range ds {
			if slices.Contains(jobs, d) {
				continue
			}
			jobs = append(jobs, d)
			if ups[d], err = readDependsOn(ctx, s.st, s.ns, d); err != nil {
				return "", err
			}
			pol, _, err := s.st.Get(ctx, jobPath(s.ns, d, nConfig, jobconfig.FieldUpstreamFailure))
			if err != nil && !errors.Is(err, store.ErrNoNode) {
				return "", fmt.Errorf("workflow: read %s's upstreamFailure: %w", d, err)
			}
			runOnFailure[d] = jobconfig.UpstreamFailure(strings.TrimSpace(string(pol))) == jobconfig.UpstreamFailureRun
		}
	}
	for _, j := range jobs {
		for _, dir := range []string{nRuns, nOpen} {
			if err := store.CreateAll(ctx, s.st, jobPath(s.ns, j, nWorkflow, dir)); err != nil {
				return "", fmt.Errorf("workflow: create %s: %w", jobPath(s.ns, j, nWorkflow, dir), err)
			}
		}
	}
	now := s.now()
	ops := []store.Op{
		&store.SetOp{Path: seqPath, Data: []byte(strconv.FormatInt(last+1, 10)), Version: seq.version},
		&store.CreateOp{Path: stepPath(s.ns, s.job, run), Data: encode(Step{Run: run, Job: s.job, State: StateRunning, Total: total, Jobs: jobs, Created: now, Started: now})},
		&store.CreateOp{Path: store.Join(stepPath(s.ns, s.job, run), nItems)},
		&store.CreateOp{Path: s.path(nOpen, run)},
	}
	for _, j := range jobs[1:] {
		ops = append(ops,
			&store.CreateOp{Path: stepPath(s.ns, j, run), Data: encode(Step{Run: run, Job: j, State: StatePending, Upstreams: ups[j], RunOnFailure: runOnFailure[j], Created: now})},
			&store.CreateOp{Path: store.Join(stepPath(s.ns, j, run), nItems)})
	}
	if _, err := s.st.Multi(ctx, ops...); err != nil {
		if lostRace(err) {
			return "", errReplan
		}
		return "", fmt.Errorf("workflow: start workflow run %s: %w", run, err)
	}
	s.prune(ctx, last+1-KeepRuns)
	return run, nil
}

// KeepRuns is how many workflow runs of a first job are kept: starting
// run n deletes run n-KeepRuns's nodes when every step of it is decided
// (an undecided one is kept, for an operator to see).
const KeepRuns = 100

// prune deletes the first job's n-th workflow run, best effort (a run
// left is deleted by no later start; it costs its nodes only).
func (s *Steps) prune(ctx context.Context, n int64) {
	if n <= 0 {
		return
	}
	run := RunID(s.job, n)
	root, _, err := ReadStep(ctx, s.st, s.ns, s.job, run)
	if err != nil {
		return
	}
	for _, j := range root.Jobs {
		st, _, err := ReadStep(ctx, s.st, s.ns, j, run)
		if err != nil && !errors.Is(err, store.ErrNoNode) || err == nil && !st.Decided() {
			return
		}
	}
	for _, j := range slices.Backward(root.Jobs) {
		_ = store.DeleteAll(ctx, s.st, stepPath(s.ns, j, run))
	}
}

// ErrNotOwner: a record's fence (Record) refused it: the run that ran the
// items no longer owns them, and nothing was recorded. Their next run (the
// items' new owner's, or their failover run) runs and records them in the
// workflow run, as for a run cut before its record.
var ErrNotOwner = errors.New("workflow: the run no longer owns its items; not recorded")

// Record records the completion of items in the job's step of workflow
// run run (outcomes: item -> error text, "" for success) and, when they
// complete the step, decides it and every step after it that this
// decides, all in one transaction. An item completed already is not
// recorded again. It returns the steps it started.
//
// fence, the run's ownership of the items (protocol.Run.Fence), goes
// first in that transaction: once the run no longer owns them (its
// session ended after its last check, its items failed over), the record
// is refused (ErrNotOwner) and decides nothing, so no step starts while
// the items' next run may still commit.
func (s *Steps) Record(ctx context.Context, run string, outcomes map[int]string, fence ...store.Op) (started []string, err error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		started, err = s.record(ctx, run, outcomes, fence)
		if !errors.Is(err, errReplan) {
			return started, err
		}
	}
	return nil, fmt.Errorf("workflow: job %s: record in %s: no commit after %d attempts (concurrent writers)", s.job, run, maxAttempts)
}

func (s *Steps) record(ctx context.Context, run string, outcomes map[int]string, fence []store.Op) ([]string, error) {
	step, version, err := ReadStep(ctx, s.st, s.ns, s.job, run)
	if err != nil {
		return nil, err
	}
	if step.State != StateRunning {
		return nil, nil
	}
	done, err := completedItems(ctx, s.st, s.ns, s.job, run)
	if err != nil {
		return nil, err
	}
	var ops []store.Op
	for _, i := range sortedKeys(outcomes) {
		if i < 0 || i >= step.Total || done[i] {
			continue
		}
		ops = append(ops, &store.CreateOp{Path: store.Join(stepPath(s.ns, s.job, run), nItems, strconv.Itoa(i)), Data: []byte(outcomes[i])})
		step.Completed++
		if outcomes[i] != "" {
			step.Failed++
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	var started []string
	if step.Completed >= step.Total {
		step.State, step.Ended = StateSucceeded, s.now()
		if step.Failed > 0 {
			step.State = StateFailed
		}
		ops = append(ops, &store.DeleteOp{Path: s.path(nOpen, run), Version: store.AnyVersion})
		more, st, err := s.decideAfter(ctx, run, step, nil)
		if err != nil {
			return nil, err
		}
		ops, started = append(ops, more...), st
	}
	ops = append(ops, &store.SetOp{Path: stepPath(s.ns, s.job, run), Data: encode(step), Version: version})
	if _, err := s.st.Multi(ctx, append(slices.Clip(fence), ops...)...); err != nil {
		if me := (*store.MultiError)(nil); errors.As(err, &me) && me.Index < len(fence) {
			return nil, fmt.Errorf("workflow: record %s's items in %s: %w: %w", s.job, run, ErrNotOwner, err)
		}
		if lostRace(err) {
			return nil, errReplan
		}
		return nil, fmt.Errorf("workflow: record %s's items in %s: %w", s.job, run, err)
	}
	return started, nil
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// decideAfter plans the decisions that the step decided (this job's, now
// in its final state) makes in workflow run run: every pending step all of
// whose upstream steps are decided starts (or stops, when one failed or
// stopped and its policy is stop; a stop decides the steps after it in
// turn). The ops check the version of every other step read, so that two
// writers deciding upstream steps of one dependent at once cannot both
// miss it, nor both start it.
//
// reset are steps the caller sets back to pending (with the versions it
// read them at), written by these ops whether or not they start.
func (s *Steps) decideAfter(ctx context.Context, run string, decided Step, reset map[string]versioned) ([]store.Op, []string, error) {
	first, _, ok := ParseRunID(run)
	if !ok {
		return nil, nil, fmt.Errorf("workflow: %q is not a workflow run id", run)
	}
	jobs := decided.Jobs
	if first != s.job {
		root, _, err := ReadStep(ctx, s.st, s.ns, first, run)
		switch {
		case errors.Is(err, store.ErrNoNode):
			// The first job was removed: its workflow runs start no
			// more steps (this one's items are still recorded).
			jobs = nil
		case err != nil:
			return nil, nil, err
		default:
			jobs = root.Jobs
		}
	}
	p := &planner{s: s, run: run, steps: map[string]*planned{s.job: {step: decided, changed: true}}}
	for j, v := range reset {
		p.steps[j] = &planned{step: v.step, version: v.version, changed: true}
	}
	var ops []store.Op
	var started []string
	// Steps decided in this transaction, whose dependents are looked at.
	queue := []string{s.job}
	for len(queue) > 0 {
		up := queue[0]
		queue = queue[1:]
		for _, j := range jobs {
			r, err := p.get(ctx, j)
			if err != nil {
				return nil, nil, err
			}
			if r.step.State != StatePending || !slices.Contains(r.step.Upstreams, up) {
				continue
			}
			ready, clean, err := p.upstreamsDecided(ctx, r.step)
			if err != nil {
				return nil, nil, err
			}
			if !ready {
				continue
			}
			r.changed = true
			if !clean && !r.step.RunOnFailure {
				r.step.State, r.step.Ended = StateStopped, s.now()
				queue = append(queue, j)
				continue
			}
			more, err := p.start(ctx, j, r)
			if err != nil {
				return nil, nil, err
			}
			ops, started = append(ops, more...), append(started, j)
		}
	}
	return append(ops, p.writes()...), started, nil
}

// planner is decideAfter's view of a workflow run's steps: each step read
// once, with the version it was read at, and whether the plan changed it.
type planner struct {
	s     *Steps
	run   string
	steps map[string]*planned
}

type planned struct {
	step    Step
	version int32
	changed bool
	// gone: the step's job was removed (its step with it). It is not
	// started, and counts as stopped for the steps after it.
	gone bool
}

func (p *planner) get(ctx context.Context, job string) (*planned, error) {
	if r, ok := p.steps[job]; ok {
		return r, nil
	}
	st, v, err := ReadStep(ctx, p.s.st, p.s.ns, job, p.run)
	if errors.Is(err, store.ErrNoNode) {
		r := &planned{step: Step{Run: p.run, Job: job, State: StateStopped}, gone: true}
		p.steps[job] = r
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r := &planned{step: st, version: v}
	p.steps[job] = r
	return r, nil
}

// upstreamsDecided reports whether every upstream step of step is decided
// and whether all of them succeeded.
func (p *planner) upstreamsDecided(ctx context.Context, step Step) (ready, clean bool, err error) {
	clean = true
	for _, u := range step.Upstreams {
		ur, err := p.get(ctx, u)
		if err != nil {
			return false, false, err
		}
		if !ur.step.Decided() {
			return false, false, nil
		}
		clean = clean && countsAsSuccess(ur.step.State)
	}
	return true, clean, nil
}

// start starts job's step r: running on the job's total now, open, and
// its servers triggered.
func (p *planner) start(ctx context.Context, job string, r *planned) ([]store.Op, error) {
	total, err := p.s.totalOf(ctx, job)
	if err != nil {
		return nil, err
	}
	r.step.State, r.step.Total, r.step.Started = StateRunning, total, p.s.now()
	trig, err := triggerOps(ctx, p.s.st, p.s.ns, job)
	if err != nil {
		return nil, err
	}
	return append([]store.Op{&store.CreateOp{Path: jobPath(p.s.ns, job, nWorkflow, nOpen, p.run)}}, trig...), nil
}

// writes are the plan's step writes, the decided step's aside (its
// writer's): each step changed set at the version read, each one read
// checked at it.
func (p *planner) writes() []store.Op {
	var ops []store.Op
	for _, j := range slices.Sorted(maps.Keys(p.steps)) {
		r := p.steps[j]
		switch {
		case j == p.s.job, r.gone:
		case r.changed:
			ops = append(ops, &store.SetOp{Path: stepPath(p.s.ns, j, p.run), Data: encode(r.step), Version: r.version})
		default:
			ops = append(ops, &store.CheckOp{Path: stepPath(p.s.ns, j, p.run), Version: r.version})
		}
	}
	return ops
}

// versioned is a step with the version of its node it was read at.
type versioned struct {
	step    Step
	version int32
}

// totalOf reads a job's shardingTotalCount as stored.
func (s *Steps) totalOf(ctx context.Context, job string) (int, error) {
	data, _, err := s.st.Get(ctx, jobPath(s.ns, job, nConfig, jobconfig.FieldShardingTotalCount))
	if err != nil {
		return 0, fmt.Errorf("workflow: read %s's shardingTotalCount: %w", job, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("workflow: %s's stored shardingTotalCount %q is not a positive number", job, data)
	}
	return n, nil
}

// triggerOps are the writes that ask every server of job to run it now:
// a trigger node under each servers/{id} that has none (the protocol's
// operator trigger, as `shardflow trigger` writes it). A server that
// joins later runs the step when it joins (dataflow's Node looks for open
// steps then), and every server of a job in a workflow looks again at
// its reconcile interval.
func triggerOps(ctx context.Context, st store.Store, ns, job string) ([]store.Op, error) {
	dir := jobPath(ns, job, nServers)
	ids, _, err := st.Children(ctx, dir)
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", dir, err)
	}
	var ops []store.Op
	for _, id := range ids {
		p := store.Join(dir, id, nTrigger)
		ok, _, err := st.Exists(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("workflow: read %s: %w", p, err)
		}
		if ok {
			// Consumed before this transaction commits, it would start a
			// run that does not see the step yet: the check makes it plan
			// again, with a trigger of its own.
			ops = append(ops, &store.CheckOp{Path: p, Version: store.AnyVersion})
		} else {
			ops = append(ops, &store.CreateOp{Path: p, Mode: store.Persistent})
		}
	}
	return ops, nil
}

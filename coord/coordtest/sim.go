package coordtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// Simulate runs one seeded schedule of the protocol on b and returns the
// invariant violations it found (none: nil). The seed decides everything
// the schedule does: how many servers (1 to 8), and a random sequence of
// joins, graceful leaves, crashes (session killed), session expiries,
// disconnects and reconnects, pauses and resumes, disabling and enabling of
// servers and items, config edits (total, failover, misfire,
// monitorExecution, maxTimeDiffSeconds), clock skew, and triggers whose
// runs stay open across later steps and commit through the fencing check.
// The protocol's own goroutines are not under the seed's control, so a
// replay repeats the schedule, not every interleaving.
//
// Invariants, checked during the schedule:
//   - a fenced commit (Run.CheckOwnership returned nil) of an item never
//     carries an epoch lower than an earlier accepted commit of that item,
//     and one (item, epoch) is accepted for one server only;
//   - every error is one the API documents for the call.
//
// and after it, once every fault is healed (reconnected, clock restored):
// within simQuietTriggers triggers on every registered server, every item
// not disabled is owned by exactly one live enabled server, every live
// enabled server owns at least one item when they are no more than the
// total, the resharding flag is down and no item is left running.
// Goroutines left after the servers stop are the caller's TestMain's
// (goleak) to find.
func Simulate(t *testing.T, b Backend, seed int64) []string {
	return simulate(t, b, seed, func() {})
}

// SimulateMem runs the schedule of seed on a fresh memstore inside a
// testing/synctest bubble: time is the bubble's fake clock (timeouts and
// retry delays cost no wall time) and after every step the schedule waits
// until every goroutine of the protocol is blocked, so each step starts on
// the state the previous one left once it had fully settled. A replay of a
// seed repeats the schedule and, step by step, its outcome; only the order
// of events racing within one step (concurrent Begins, say) is the Go
// scheduler's. ZooKeeper cannot run in a bubble (its I/O is real): there
// Simulate checks the same invariants without this determinism.
func SimulateMem(t *testing.T, seed int64) []string {
	var vs []string
	synctest.Test(t, func(t *testing.T) {
		vs = simulate(t, Mem(), seed, synctest.Wait)
	})
	return vs
}

func simulate(t *testing.T, b Backend, seed int64, settle func()) []string {
	s := &sim{t: t, h: NewHarness(t, b), rng: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)), seed: seed, settle: settle,
		claims: os.Getenv("SIM_FAILOVER_CLAIMS") != "0"}
	defer s.stopAll()
	return s.run()
}

// simQuietTriggers bounds the triggers the quiet phase may take to settle.
const simQuietTriggers = 4

const simJob = "sim"

type simServer struct {
	id           string
	st           store.Store
	reg          *coord.Registry
	job          *coord.Job
	disconnected bool
	// begin is an open trigger: its Begin runs on its own goroutine (it
	// may wait for the leader's reshard, which waits for other open runs)
	// and delivers here; a later commit step commits the run.
	begin       bool
	cancelBegin context.CancelFunc
}

type beginResult struct {
	sv  *simServer
	run *coord.Run
	err error
}

type fence struct {
	epoch    int64
	server   string
	failover bool
}

type sim struct {
	t      *testing.T
	h      *Harness
	rng    *rand.Rand
	seed   int64
	settle func() // after each step: wait for the protocol to quiesce (synctest.Wait), or nothing
	// claims: triggers claim failover items first, as the Node does
	// (SIM_FAILOVER_CLAIMS=0 turns it off).
	claims  bool
	servers []*simServer
	total   int
	skewed  bool
	// accepted is the fencing ledger: per item, the last accepted commit.
	accepted   map[int]fence
	owners     map[[2]int64]string // (item, epoch) -> server
	results    chan beginResult    // open triggers' Begins deliver here
	pending    int                 // open triggers whose Begin has not delivered
	violations []string
	log        []string
}

func (s *sim) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *sim) step(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *sim) run() []string {
	n := 1 + s.rng.IntN(8)
	s.total = 1 + s.rng.IntN(8)
	s.accepted = map[int]fence{}
	s.owners = map[[2]int64]string{}
	s.results = make(chan beginResult, 8)
	for i := range n {
		s.servers = append(s.servers, &simServer{id: fmt.Sprintf("s%d", i)})
	}
	for _, sv := range s.servers {
		s.join(sv)
		s.settle()
	}
	steps := 10 + s.rng.IntN(20)
	for range steps {
		s.randomStep()
		s.settle()
	}
	s.quiet()
	if len(s.violations) > 0 {
		s.violations = append(s.violations, "schedule: "+strings.Join(s.log, "; "))
	}
	return s.violations
}

func (s *sim) ctx() context.Context { return testCtx(s.t) }

func (s *sim) config() jobconfig.Config {
	return Config(simJob, s.total, func(c *jobconfig.Config) { c.Failover = true })
}

func (s *sim) join(sv *simServer) {
	s.step("join %s", sv.id)
	st := s.h.B.Connect(s.t)
	reg, err := coord.NewRegistry(st, coord.RegistryConfig{Namespace: s.h.NS, ServerID: sv.id, HostName: "host-" + sv.id, Logger: quietLogger(), Now: s.h.Now})
	if err != nil {
		s.violate("NewRegistry %s: %v", sv.id, err)
		return
	}
	j, err := reg.Join(s.ctx(), s.config())
	if err != nil {
		_ = reg.Close(context.Background())
		_ = st.Close()
		// A crashed predecessor's session may still hold the id on real
		// ZooKeeper until it expires: documented, and Join waited for it.
		if errors.Is(err, coord.ErrServerIDInUse) {
			return
		}
		s.violate("Join %s: %v", sv.id, err)
		return
	}
	sv.st, sv.reg, sv.job, sv.disconnected = st, reg, j, false
}

func (s *sim) up() []*simServer {
	var out []*simServer
	for _, sv := range s.servers {
		if sv.job != nil {
			out = append(out, sv)
		}
	}
	return out
}

func (s *sim) pick(list []*simServer) *simServer {
	if len(list) == 0 {
		return nil
	}
	return list[s.rng.IntN(len(list))]
}

func (s *sim) randomStep() {
	up := s.up()
	sv := s.pick(up)
	switch op := s.rng.IntN(16); {
	case op < 4: // triggers are the common case
		s.trigger(up)
	case op < 6:
		s.commitOpen(false)
	case op == 6:
		var down []*simServer
		for _, x := range s.servers {
			if x.job == nil {
				down = append(down, x)
			}
		}
		if d := s.pick(down); d != nil {
			s.join(d)
		}
	case op == 7 && sv != nil:
		s.step("leave %s", sv.id)
		s.connected(sv)
		s.stop(sv, false)
	case op == 8 && sv != nil:
		s.step("crash %s", sv.id)
		s.stop(sv, true)
	case op == 9 && sv != nil:
		s.step("expire %s", sv.id)
		s.connected(sv)
		s.h.B.Expire(s.t, sv.st)
	case op == 10 && sv != nil:
		if sv.disconnected {
			s.step("reconnect %s", sv.id)
			s.h.B.Reconnect(s.t, sv.st)
		} else {
			s.step("disconnect %s", sv.id)
			s.connected(sv)
			s.h.B.Disconnect(s.t, sv.st)
		}
		sv.disconnected = !sv.disconnected
	case op == 11 && sv != nil:
		on := s.rng.IntN(2) == 0
		s.step("pause %s %v", sv.id, on)
		s.admin(func(ctx context.Context, a *coord.Admin) error {
			if on {
				return a.Pause(ctx, simJob, sv.id)
			}
			return a.Resume(ctx, simJob, sv.id)
		})
	case op == 12 && sv != nil:
		on := s.rng.IntN(2) == 0
		s.step("disable %s %v", sv.id, on)
		s.admin(func(ctx context.Context, a *coord.Admin) error {
			if on {
				return a.Disable(ctx, simJob, sv.id)
			}
			return a.Enable(ctx, simJob, sv.id)
		})
	case op == 13:
		item, on := s.rng.IntN(s.total), s.rng.IntN(2) == 0
		s.step("disable item %d %v", item, on)
		s.admin(func(ctx context.Context, a *coord.Admin) error {
			if on {
				return a.DisableItem(ctx, simJob, item)
			}
			return a.EnableItem(ctx, simJob, item)
		})
	case op == 14:
		s.editConfig()
	case op == 15:
		if s.skewed {
			s.step("clock restored")
			s.h.B.SkewServerClock(s.t, 0)
		} else {
			d := time.Duration(30+s.rng.IntN(60)) * time.Second
			s.step("clock skewed %v", d)
			s.h.B.SkewServerClock(s.t, d)
		}
		s.skewed = !s.skewed
	}
}

// connected waits until sv's store has a connected session: on ZooKeeper a
// session expired by an earlier step is replaced asynchronously, and a cut
// or a graceful leave acts on the replacement.
func (s *sim) connected(sv *simServer) {
	if sv.disconnected {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx(), 15*time.Second)
	defer cancel()
	if _, err := store.AwaitSession(ctx, sv.st, func(cur store.Session) bool { return cur.State == store.StateConnected }); err != nil {
		s.violate("%s: no connected session after 15s", sv.id)
	}
}

// admin runs an operator action; a server or item that is gone meanwhile
// is a documented refusal, anything else a violation.
func (s *sim) admin(fn func(context.Context, *coord.Admin) error) {
	err := fn(s.ctx(), s.h.Admin)
	if err != nil && !errors.Is(err, coord.ErrNoServer) && !errors.Is(err, coord.ErrNoItem) {
		s.violate("admin: %v", err)
	}
}

func (s *sim) editConfig() {
	var field, value string
	switch s.rng.IntN(5) {
	case 0:
		total := 1 + s.rng.IntN(8)
		field, value = jobconfig.FieldShardingTotalCount, fmt.Sprint(total)
	case 1:
		field, value = jobconfig.FieldFailover, fmt.Sprint(s.rng.IntN(2) == 0)
	case 2:
		field, value = jobconfig.FieldMisfire, fmt.Sprint(s.rng.IntN(2) == 0)
	case 3:
		field, value = jobconfig.FieldMonitorExecution, fmt.Sprint(s.rng.IntN(2) == 0)
	case 4:
		field, value = jobconfig.FieldMaxTimeDiffSeconds, fmt.Sprint([]int{-1, 0, 10}[s.rng.IntN(3)])
	}
	s.step("config %s=%s", field, value)
	if err := s.h.Admin.SetConfig(s.ctx(), simJob, field, value); err != nil {
		s.violate("SetConfig %s=%s: %v", field, value, err)
		return
	}
	if field == jobconfig.FieldShardingTotalCount {
		fmt.Sscan(value, &s.total)
	}
}

// beginErrOK reports whether err is one Begin documents.
func beginErrOK(err error) bool {
	for _, e := range []error{coord.ErrItemsRunning, coord.ErrPaused, coord.ErrShutdown, coord.ErrClockSkew, coord.ErrSessionLost, coord.ErrBadConfig} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// trigger begins a run on every up, connected server without an open
// trigger. Begins run concurrently and stay open until a commit step.
func (s *sim) trigger(up []*simServer) {
	n := 0
	for _, sv := range up {
		if sv.begin || sv.disconnected {
			continue
		}
		n++
		ctx, cancel := context.WithCancel(s.ctx())
		sv.begin, sv.cancelBegin = true, cancel
		s.pending++
		job := sv.job
		claim := s.claims
		go func() {
			if claim {
				// As the Node does on SignalFailover: claim a queued
				// crashed item, which this Begin then runs.
				_, _ = job.ClaimFailover(ctx)
			}
			r, err := job.Begin(ctx, s.h.Now())
			s.results <- beginResult{sv, r, err}
		}()
	}
	s.step("trigger %d servers", n)
}

// commitOpen commits the open triggers whose Begin returned; with wait it
// goes on until every open Begin returned (bounded: a Begin may wait for
// the leader's reshard, which waits for the runs committed here).
func (s *sim) commitOpen(wait bool) {
	timeout := time.After(10 * time.Second)
	for s.pending > 0 {
		s.settle()
		if batch := s.returned(); len(batch) > 0 {
			for _, res := range batch {
				s.finish(res)
				s.settle()
			}
			continue
		}
		if !wait {
			return
		}
		select {
		case res := <-s.results:
			s.finish(res)
		case <-timeout:
			s.violate("%d Begins still waiting after 10s", s.pending)
			for _, sv := range s.servers {
				if sv.begin {
					sv.cancelBegin()
				}
			}
			timeout = nil
		}
	}
}

// returned takes the Begins that have delivered, in server order (not in
// the order their goroutines happened to finish: a replay commits them in
// the same order).
func (s *sim) returned() []beginResult {
	var out []beginResult
	for {
		select {
		case res := <-s.results:
			out = append(out, res)
			continue
		default:
		}
		slices.SortFunc(out, func(a, b beginResult) int { return strings.Compare(a.sv.id, b.sv.id) })
		return out
	}
}

// await ends sv's open trigger, if any: cancels its Begin and commits what
// it returned (committing others' results that come first).
func (s *sim) await(sv *simServer) {
	if !sv.begin {
		return
	}
	sv.cancelBegin()
	for sv.begin {
		s.finish(<-s.results)
	}
}

// finish commits one returned Begin through the fencing check, item by
// item, then completes the run.
func (s *sim) finish(res beginResult) {
	sv := res.sv
	sv.begin = false
	s.pending--
	sv.cancelBegin()
	if res.err != nil {
		s.step("begin %s: %v", sv.id, res.err)
		if !beginErrOK(res.err) && !errors.Is(res.err, context.Canceled) {
			s.violate("Begin on %s: %v", sv.id, res.err)
		}
		return
	}
	r := res.run
	s.step("commit %s %v", sv.id, r.Shards())
	for _, a := range r.Shards() {
		err := r.CheckOwnership(s.ctx(), a.Item)
		if err != nil {
			if !errors.Is(err, coord.ErrNotOwner) && !errors.Is(err, coord.ErrSessionLost) {
				s.violate("CheckOwnership %s item %d: %v", sv.id, a.Item, err)
			}
			continue
		}
		last, seen := s.accepted[a.Item]
		if seen && a.Epoch < last.epoch {
			s.violate("item %d: %s committed epoch %d%s after %s committed epoch %d%s", a.Item, sv.id, a.Epoch, failoverMark(a.Failover), last.server, last.epoch, failoverMark(last.failover))
		}
		key := [2]int64{int64(a.Item), a.Epoch}
		if o, ok := s.owners[key]; ok && o != sv.id {
			s.violate("item %d epoch %d accepted for %s and %s", a.Item, a.Epoch, o, sv.id)
		}
		s.owners[key] = sv.id
		s.accepted[a.Item] = fence{epoch: a.Epoch, server: sv.id, failover: a.Failover}
	}
	// A Complete on a cut connection waits for it within its ctx, then
	// leaves the completion to the job (written when the session resumes):
	// a short ctx there. A connected one gets the usual bound (a loaded
	// ZooKeeper may take seconds).
	cctx := s.ctx()
	if sv.disconnected {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, 2*time.Second)
		defer cancel()
	}
	if err := r.Complete(cctx, time.Time{}); err != nil && !errors.Is(err, coord.ErrSessionLost) && !errors.Is(err, coord.ErrNotOwner) {
		s.violate("Complete %s: %v", sv.id, err)
	}
}

func failoverMark(failover bool) string {
	if failover {
		return " (failover)"
	}
	return ""
}

// stop ends a server: gracefully (Registry.Close), or as a crash (the
// session killed first, then the handle's goroutines stopped).
func (s *sim) stop(sv *simServer, crash bool) {
	if sv.job == nil {
		return
	}
	if crash {
		s.h.B.Kill(s.t, sv.st)
	} else if sv.disconnected {
		// A graceful leave needs the store: reconnect first.
		s.h.B.Reconnect(s.t, sv.st)
		sv.disconnected = false
	}
	// A Begin still waiting ends with the server: its ctx is cancelled.
	s.await(sv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sv.reg.Close(ctx); err != nil && !crash && !sv.disconnected {
		s.violate("Close %s: %v", sv.id, err)
	}
	_ = sv.st.Close()
	sv.job, sv.reg, sv.st = nil, nil, nil
}

func (s *sim) stopAll() {
	for _, sv := range s.servers {
		if sv.job != nil {
			if sv.disconnected {
				s.h.B.Reconnect(s.t, sv.st)
				sv.disconnected = false
			}
			s.stop(sv, false)
		}
	}
	if s.skewed {
		s.h.B.SkewServerClock(s.t, 0)
	}
}

// quiet heals every fault, then triggers until the assignment settles.
func (s *sim) quiet() {
	s.step("quiet")
	if s.skewed {
		s.h.B.SkewServerClock(s.t, 0)
		s.skewed = false
	}
	for _, sv := range s.up() {
		if sv.disconnected {
			s.h.B.Reconnect(s.t, sv.st)
			sv.disconnected = false
		}
	}
	// Healing first: an open Begin may wait for a leader that is still
	// re-registering after an expiry (real seconds on ZooKeeper: seed
	// 500043), and the Begins' bound starts once the faults are over.
	s.awaitHealed()
	s.commitOpen(true)
	var last string
	for range simQuietTriggers {
		s.trigger(s.up())
		s.commitOpen(true)
		if last = s.settled(); last == "" {
			return
		}
	}
	s.violate("not settled after %d quiet triggers: %s", simQuietTriggers, last)
}

// simHealTimeout bounds the wait for a healed schedule's sessions to settle
// (real time on ZooKeeper: a session expiry, a re-registration).
const simHealTimeout = 30 * time.Second

// awaitHealed waits until the healed faults have run their course: every
// up server connected and registered on its session, and every stopped
// server offline: a crashed one's session expired, and a graceful leave's
// too when its close did not reach the service (a cut connection). On memstore
// this holds at once; on ZooKeeper expiries and re-registrations take real
// time, and triggers before them would count against the quiet bound.
func (s *sim) awaitHealed() {
	deadline := time.Now().Add(simHealTimeout)
	for {
		why := s.unhealed()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.violate("not healed after %v: %s", simHealTimeout, why)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sim) unhealed() string {
	for _, sv := range s.up() {
		if sess, _ := sv.st.Session(); sess.State != store.StateConnected {
			return sv.id + " not connected"
		}
		select {
		case <-sv.job.Lost():
			return sv.id + " not registered on its session yet"
		default:
		}
	}
	down := map[string]bool{}
	for _, sv := range s.servers {
		if sv.job == nil {
			down[sv.id] = true
		}
	}
	if len(down) == 0 {
		return ""
	}
	st, err := s.h.Admin.Status(s.ctx(), simJob)
	if err != nil {
		return fmt.Sprintf("status: %v", err)
	}
	for _, ss := range st.Servers {
		if down[ss.ID] && ss.Status != "OFFLINE" {
			return "stopped " + ss.ID + " still " + ss.Status
		}
	}
	return ""
}

// settled checks the quiet-state invariants on the stored state; "" when
// they hold.
func (s *sim) settled() string {
	st, err := s.h.Admin.Status(s.ctx(), simJob)
	if err != nil {
		return fmt.Sprintf("status: %v", err)
	}
	registered := false
	for _, ss := range st.Servers {
		registered = registered || ss.Status != "OFFLINE"
	}
	if st.ReshardingPending && registered {
		// With no server registered nobody reshards until one joins.
		return "resharding flag still up"
	}
	var live []coord.ServerStatus
	for _, ss := range st.Servers {
		if ss.Status != "OFFLINE" && !ss.Disabled && !ss.Shutdown {
			live = append(live, ss)
		}
	}
	owner := map[int]string{}
	for _, ss := range live {
		for _, it := range ss.Sharding {
			if o, dup := owner[it]; dup {
				return fmt.Sprintf("item %d owned by %s and %s", it, o, ss.ID)
			}
			owner[it] = ss.ID
		}
		if len(ss.Sharding) == 0 && len(live) <= s.total {
			return fmt.Sprintf("live enabled server %s owns nothing (%d live, total %d)", ss.ID, len(live), s.total)
		}
	}
	for _, is := range st.Items {
		if is.Item >= s.total {
			continue
		}
		if _, ok := owner[is.Item]; !ok && len(live) > 0 {
			return fmt.Sprintf("item %d has no live enabled owner", is.Item)
		}
		if is.Running {
			return fmt.Sprintf("item %d still running", is.Item)
		}
	}
	if len(live) > 0 && len(owner) != s.total {
		return fmt.Sprintf("owned items %v, want 0..%d", slices.Sorted(maps.Keys(owner)), s.total-1)
	}
	return ""
}

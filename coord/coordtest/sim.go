package coordtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
)

// Simulate runs one seeded schedule of the protocol on b and returns the
// invariant violations it found (none: nil). The seed decides everything
// the schedule does: how many servers (1 to 8), and a random sequence of
// joins, graceful leaves, crashes (session killed), session expiries,
// disconnects and reconnects, pauses and resumes, disabling and enabling of
// servers and items, config edits (total, failover, misfire,
// monitorExecution, maxTimeDiffSeconds, and cron: valid Quartz expressions,
// which nothing in the schedule evaluates, so wall time decides nothing),
// clock skew, and triggers whose runs stay open across later steps and
// commit through the fencing check. In about half the schedules (the seed
// decides) every run also goes through the distribute-once barrier
// (Run.Once), phase "started" then "completed", right after its Begin.
// The protocol's own goroutines are not under the seed's control, so a
// replay repeats the schedule, not every interleaving.
//
// Invariants, checked during the schedule:
//   - a fenced commit (Run.CheckOwnership returned nil) of an item never
//     carries an epoch lower than an earlier accepted commit of that item,
//     and one (item, epoch) is accepted for one server only;
//   - every error is one the API documents for the call;
//   - failover runs an item again at most once per crash: a run of an item
//     is "cut" when its server crashes or its session expires after the
//     run's trigger and the run did not complete (Complete returned an
//     error). A failover run (Assignment.Failover) of an item is allowed
//     only while the item's last run is cut, and it (like a normal run)
//     ends that: a second failover run for one crash, or one of an item
//     whose last run completed, is a violation. On ZooKeeper a Begin that
//     failed on a lost connection or a cancelled ctx may have marked its
//     items running all the same (the reply was lost), so a failover run
//     after such a Begin is not counted against the item; nor is one after
//     a disconnect of the item's server that lasted two thirds of the
//     session timeout (ZooKeeper may have expired the session: a cut no
//     step made, allowed but not required to run again), or on memstore
//     the whole timeout (the schedule's waits move the bubble's clock:
//     memstore expired the session). A failover run
//     whose Begin's config (Run.Config) has failover or monitorExecution
//     off is a violation (docs/configuration.md promises none);
//   - distribute-once: each callback reads the registrations it serves
//     (guarantee/{phase}, the items below its run's total: one beyond it
//     is a run's of another total, begun during a reshard, and waits for
//     its own set; one made after the set was taken, its creation zxid not
//     below the phase node's Mzxid, the take's mark, belongs to the next
//     set); a registration (its node, by creation zxid)
//     served by two callbacks is a violation (two callbacks for one set),
//     and so is a Once call that returned nil without running the callback
//     while no callback of its phase started during the call (released
//     without one). Once may also return ErrGuaranteeTimeout, the ctx's
//     error, ErrSessionLost or a lost connection (a participant that never
//     completes its set: down, paused, disconnected).
//
// and after it, once every fault is healed (reconnected, clock restored):
// within simQuietTriggers triggers on every registered server, every item
// not disabled is owned by exactly one live enabled server, every live
// enabled server owns at least one item when they are no more than the
// total, the resharding flag is down, no item is left running, the runs
// carry the stored config (total, cron), the status shows each item's
// lastBeginTime and lastCompleteTime as its nodes hold them (CheckItemTimes:
// the times a status takes from run records), and every item whose run was cut
// while failover (and monitorExecution) was on has run again, by failover
// or, when the reshard won the race and its new owner ran it first, by a
// normal run. Not required (and said so): an item whose cut came while
// failover or monitorExecution was off, or that an edit switched off
// before it ran again, an item disabled meanwhile or beyond a lowered
// total. On memstore with the stored config unmonitored (a quarter of the
// schedules start so), a trigger in the settled state must send no write
// request (checkQuietTrigger). On memstore, the last quiet trigger's runs, when they cover every
// runnable item, must pass each barrier phase with exactly one callback
// and no timeout (on ZooKeeper a timeout there is wall time, so this one
// is memstore's only). Goroutines left after the servers stop are the
// caller's TestMain's (goleak) to find.
func Simulate(t *testing.T, b Backend, seed int64, opts ...SimOption) []string {
	return simulate(t, b, seed, false, func() {}, opts)
}

// SimOption changes how Simulate and SimulateMem run a seed's schedule.
type SimOption func(*sim)

// Monitored starts the schedule's job monitored whatever its seed draws:
// the schedule as seeds found before 72f1a73 ran it. Since that commit a
// quarter of the seeds start unmonitored, a quarter of the regression and
// open seeds among them (all found before it): without Monitored those
// replay another schedule than the one that failed.
func Monitored() SimOption { return func(s *sim) { s.unmonitored = false } }

// SimulateMem runs the schedule of seed on a fresh memstore inside a
// testing/synctest bubble: time is the bubble's fake clock (timeouts and
// retry delays cost no wall time) and after every step the schedule waits
// until every goroutine of the protocol is blocked, so each step starts on
// the state the previous one left once it had fully settled. A replay of a
// seed repeats the schedule and, step by step, its outcome; only the order
// of events racing within one step (concurrent Begins, say) is the Go
// scheduler's. ZooKeeper cannot run in a bubble (its I/O is real): there
// Simulate checks the same invariants without this determinism.
func SimulateMem(t *testing.T, seed int64, opts ...SimOption) []string {
	var vs []string
	synctest.Test(t, func(t *testing.T) {
		vs = simulate(t, Mem(), seed, true, synctest.Wait, opts)
	})
	return vs
}

// scheduleBackend is b for one schedule: where b's clock skew moves the
// servers' local clock (LocalClock: ZooKeeper, whose server clock cannot
// move), the schedule gets a local clock of its own. The schedules that run
// at once on one Backend (make sim STORE=zk, TestSimulationZooKeeper) must not
// skew each other's servers: ZooKeeper seed 991210's quiet phase found its
// servers' clocks 40 s behind, skewed by another schedule, every Begin
// failing its clock check.
func scheduleBackend(b Backend) Backend {
	if _, ok := b.(LocalClock); ok {
		return &scheduleClock{Backend: b}
	}
	return b
}

// scheduleClock is a Backend with a local clock of its own (scheduleBackend).
type scheduleClock struct {
	Backend
	skew atomic.Int64 // nanoseconds the service is ahead of the local clock
}

// SkewServerClock skews this schedule's local clock by -d (LocalClock).
func (c *scheduleClock) SkewServerClock(_ testing.TB, d time.Duration) { c.skew.Store(int64(d)) }

// LocalNow is the real time shifted back by this schedule's skew.
func (c *scheduleClock) LocalNow() time.Time { return time.Now().Add(-time.Duration(c.skew.Load())) }

// SessionTimeout is the wrapped Backend's, if it tells one (0 if not).
func (c *scheduleClock) SessionTimeout() time.Duration {
	if b, ok := c.Backend.(interface{ SessionTimeout() time.Duration }); ok {
		return b.SessionTimeout()
	}
	return 0
}

func simulate(t *testing.T, b Backend, seed int64, mem bool, settle func(), opts []SimOption) []string {
	b = scheduleBackend(b)
	s := &sim{t: t, h: NewHarness(t, b), rng: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)), seed: seed, settle: settle,
		claims: os.Getenv("SIM_FAILOVER_CLAIMS") != "0", mem: mem,
		// The checks added later draw from their own stream, so that the
		// schedules of the seeds found before them stay as they were.
		x: rand.New(rand.NewPCG(uint64(seed)^0x5bd1e995, uint64(seed)))}
	// A quarter of the schedules start unmonitored (drawn from a stream
	// of its own, like x's: the other schedules stay as they were), so
	// that runs which write nothing (coord/protocol/quiet.go) are common,
	// not only after the rare edit switching monitorExecution off.
	s.unmonitored = rand.New(rand.NewPCG(uint64(seed)^0x31, uint64(seed)^0x7f4a7c15)).IntN(4) == 0
	for _, o := range opts {
		o(s)
	}
	if !mem {
		// The harness's own reads and actions are bounded by their
		// progress (stallCtx), counted on the admin session.
		s.adminCount = storecount.New(s.h.AdminStore)
		s.h.Admin, s.h.AdminStore = coord.NewAdmin(s.adminCount, s.h.NS), s.adminCount
	}
	defer s.stopAll()
	return s.run()
}

// simQuietTriggers bounds the triggers the quiet phase may take to settle.
const simQuietTriggers = 4

const simJob = "sim"

type simServer struct {
	id string
	st store.Store
	// count counts the requests of its Registry (on st), for the quiet
	// phase's unmonitored trigger (checkQuietTrigger).
	count        *storecount.Store
	reg          *protocol.Registry
	job          *protocol.Job
	disconnected bool
	// begin is an open trigger: its Begin runs on its own goroutine (it
	// may wait for the leader's reshard, which waits for other open runs)
	// and delivers here; a later commit step commits the run.
	begin       bool
	cancelBegin context.CancelFunc
	// gen counts the faults that ended its session (crash, expiry): a
	// run triggered at an older gen that did not complete was cut.
	gen int
	// crashed: killed, being stopped. Its run's commit and Complete get
	// a short bound: on ZooKeeper the dead session stays suspended on
	// the client for the session timeout (the process is gone, nothing
	// would wait for it).
	crashed bool
}

type beginResult struct {
	sv    *simServer
	run   *protocol.Run
	err   error
	gen   int // sv.gen at the trigger
	round int // the trigger step
	onces []*onceCall
	items []*itemRun // the failover ledger's entries of the run's items
}

// onceCall is one Run.Once call of a run; enter and exit are sequence
// numbers of the schedule's barrier log (onceLog).
type onceCall struct {
	phase       string
	server      string
	total       int // the run's total: its set is items 0..total-1
	enter, exit int64
	ran         bool // this call ran the callback
	err         error
}

// onceLog records the barrier's callbacks across the servers' goroutines.
type onceLog struct {
	mu     sync.Mutex
	seq    int64
	starts map[string][]int64 // phase -> sequence numbers of callback starts
	served map[string]string  // "phase/item@czxid" -> server whose callback served it
	bad    []string           // violations seen inside callbacks
}

func (l *onceLog) next() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return l.seq
}

// itemRun is the last run the schedule saw begin on an item.
type itemRun struct {
	sv        *simServer
	gen       int // sv.gen at its trigger
	completed bool
	failover  bool
	uncertain int  // ledger.uncertain when it began
	cut       bool // its server's session ended before it completed
	// mayBeCut: its server was disconnected long enough for the store to
	// expire the session (seeds 950028, 960080 on ZooKeeper): a failover
	// run of the item is allowed after it, not required.
	mayBeCut bool
	// unmonitored: it began with monitorExecution off, so nothing records
	// whether it completed: a failover of the item later is not counted.
	unmonitored bool
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

	mem bool       // memstore in a synctest bubble (deterministic; no lost replies)
	x   *rand.Rand // draws of the checks added after the first seeds were found
	// once: the schedule's runs go through the distribute-once barrier.
	once bool
	ol   onceLog
	// blog keeps the barrier's debug lines for a violation's report.
	blog *barrierLog
	// round numbers the triggers; rounds keeps each round's results.
	round  int
	rounds map[int][]beginResult
	fo     ledger // failover accounting
	cron   string
	status coord.JobStatus // read by the last settled check
	// closing: the stores of crashed servers closing beside the schedule
	// (ZooKeeper), awaited when it ends.
	closing sync.WaitGroup
	// unmonitored: the job's config starts with monitorExecution off.
	unmonitored bool
	// adminCount counts the admin session's requests (real stores): the
	// progress of the harness's own calls (call).
	adminCount *storecount.Store
}

func (s *sim) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *sim) step(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
	if s.blog != nil {
		s.blog.noteStep(s.log[len(s.log)-1])
	}
	if os.Getenv("SIM_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "SIMTRACE %d %s %s\n", s.seed, time.Now().Format("15:04:05.000"), s.log[len(s.log)-1])
	}
}

func (s *sim) run() []string {
	n := 1 + s.rng.IntN(8)
	s.total = 1 + s.rng.IntN(8)
	s.accepted = map[int]fence{}
	s.owners = map[[2]int64]string{}
	s.results = make(chan beginResult, 8)
	s.rounds = map[int][]beginResult{}
	s.fo = ledger{lastRun: map[int]*itemRun{}, cut: map[int]string{}, required: map[int]string{}, disabled: map[int]bool{},
		failoverOn: true, monitorOn: !s.unmonitored, total: s.total, mem: s.mem, cutOff: map[*simServer]time.Time{}}
	if b, ok := s.h.B.(interface{ SessionTimeout() time.Duration }); ok {
		// ZooKeeper hears from a client every third of the timeout, so a
		// cut this long may already have let the session expire. memstore
		// expires a session cut off for its timeout, on the bubble's clock,
		// which the schedule's waits move (a Complete on a cut connection
		// waits 2 s: seed 9117497 had five servers cut off through five
		// such commits, 10 s, and their runs failed over).
		s.fo.expiresAfter = b.SessionTimeout() * 2 / 3
		if s.mem {
			s.fo.expiresAfter = b.SessionTimeout()
		}
	}
	s.once = s.x.IntN(2) == 0
	s.ol.starts, s.ol.served = map[string][]int64{}, map[string]string{}
	s.blog = newBarrierLog(quietLogger().Handler(), s.ol.next)
	if s.unmonitored {
		// In the schedule's log: a replay shows which variant it ran.
		s.step("start unmonitored")
	}
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
	s.ol.mu.Lock()
	s.violations = append(s.violations, s.ol.bad...)
	s.ol.mu.Unlock()
	s.fo.mu.Lock()
	s.violations = append(s.violations, s.fo.bad...)
	s.fo.mu.Unlock()
	if len(s.violations) > 0 {
		s.violations = append(s.violations, "schedule: "+strings.Join(s.log, "; "))
		if s.once {
			s.violations = append(s.violations, "barrier log (#: barrier sequence; calls: "+s.onceCalls()+"):\n\t"+strings.Join(s.blog.text(), "\n\t"))
		}
		s.violations = append(s.violations, fmt.Sprintf("protocol log (every server's Info and above, the schedule's steps between; the last %d lines):\n\t%s", protocolLogMax, strings.Join(s.blog.protocol(), "\n\t")))
	}
	return s.violations
}

func (s *sim) ctx() context.Context { return testCtx(s.t) }

// call returns the ctx of one of the harness's own calls, whose requests go
// to the counted stores. On memstore it is the test's 20 s of the bubble's
// fake time (a hang costs nothing; the seeds replay as they were found).
// On the real stores it has no deadline: it ends when those stores answer
// no request for a session timeout (stallCtx), so that a loaded machine
// slows the harness down but never fails it.
func (s *sim) call(counted ...*storecount.Store) (context.Context, context.CancelFunc) {
	if s.mem {
		return s.ctx(), func() {}
	}
	return stallCtx(context.Background(), s.stall(), counted...)
}

// stall is how long the harness's calls on the real stores may go without
// a request answered (call): the sessions' timeout (30 s in the campaigns),
// past which a store takes its own server for gone; 20 s without one.
func (s *sim) stall() time.Duration {
	if b, ok := s.h.B.(interface{ SessionTimeout() time.Duration }); ok && b.SessionTimeout() > 0 {
		return b.SessionTimeout()
	}
	return 20 * time.Second
}

// simJoinIDWait bounds, on the real stores, a Join's wait for a crashed
// predecessor's status node (RegistryConfig.ServerIDWait): as long as the
// 20 s a Join had in all before, so that a join after a crash gives up
// (ErrServerIDInUse) when it did, well inside the sim's bound.
const simJoinIDWait = 20 * time.Second

func (s *sim) config() jobconfig.Config {
	return Config(simJob, s.total, func(c *jobconfig.Config) { c.Failover, c.DisableMonitorExecution = true, s.unmonitored })
}

func (s *sim) join(sv *simServer) {
	s.step("join %s", sv.id)
	st := s.h.B.Connect(s.t)
	rc := protocol.RegistryConfig{Namespace: s.h.NS, ServerID: sv.id, HostName: "host-" + sv.id, Logger: slog.New(s.blog), Now: s.h.Now}
	count := storecount.New(st)
	if !s.mem {
		// Join's one wait of its own, for a predecessor's status node (a
		// crashed server's session until it expires), has its own bound;
		// the rest is store calls, whose time is the machine's: bounded by
		// their progress (call), not by a call's 20 s. Four Postgres
		// schedules (3800629, 31, 33, 34) failed "Join: context deadline
		// exceeded" in one burst at load ~44.
		rc.ServerIDWait = simJoinIDWait
	}
	ctx, cancel := s.call(count)
	defer cancel()
	reg, err := protocol.NewRegistry(count, rc)
	if err != nil {
		s.violate("NewRegistry %s: %v", sv.id, err)
		return
	}
	j, err := reg.Join(ctx, s.config())
	err = withCause(ctx, err)
	if err != nil {
		_ = reg.Close(context.Background())
		_ = st.Close()
		// A crashed predecessor's session may still hold the id on real
		// ZooKeeper until it expires: documented, and Join waited for it.
		if errors.Is(err, protocol.ErrServerIDInUse) {
			return
		}
		s.violate("Join %s: %v", sv.id, err)
		return
	}
	sv.st, sv.count, sv.reg, sv.job, sv.disconnected = st, count, reg, j, false
	// A new session: a disconnect of the one before (a crash while cut
	// off) says nothing about it.
	s.fo.reconnected(sv)
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
		s.fo.sessionEnds(sv, "the crash of "+sv.id)
		s.stop(sv, true)
	case op == 9 && sv != nil:
		s.step("expire %s", sv.id)
		s.connected(sv)
		s.fo.sessionEnds(sv, "the expiry of "+sv.id+"'s session")
		s.h.B.Expire(s.t, sv.st)
	case op == 10 && sv != nil:
		if sv.disconnected {
			s.step("reconnect %s", sv.id)
			s.reconnect(sv)
		} else {
			s.step("disconnect %s", sv.id)
			s.connected(sv)
			s.h.B.Disconnect(s.t, sv.st)
			s.fo.disconnected(sv)
			sv.disconnected = true
		}
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
		s.fo.setDisabled(item, on) // before: a disabled item runs nowhere
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
	bound := 15 * time.Second
	if !s.mem {
		// As the backends' Reconnect waits for a session after a restore:
		// a new session's handshake is the machine's time.
		bound = 4*s.stall() + 5*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := store.AwaitSession(ctx, sv.st, func(cur store.Session) bool { return cur.State == store.StateConnected }); err != nil {
		s.violate("%s: no connected session after %v", sv.id, bound)
	}
}

// admin runs an operator action; a server or item that is gone meanwhile
// is a documented refusal, anything else a violation.
func (s *sim) admin(fn func(context.Context, *coord.Admin) error) {
	ctx, cancel := s.call(s.adminCount)
	defer cancel()
	err := withCause(ctx, fn(ctx, s.h.Admin))
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
	// Switched off (or the item gone) before the edit lands: the items cut
	// so far need not run again (Simulate).
	s.fo.edit(field, value)
	ctx, cancel := s.call(s.adminCount)
	err := withCause(ctx, s.h.Admin.SetConfig(ctx, simJob, field, value))
	cancel()
	if err != nil {
		s.violate("SetConfig %s=%s: %v", field, value, err)
		return
	}
	if field == jobconfig.FieldShardingTotalCount {
		fmt.Sscan(value, &s.total)
	}
	if s.x.IntN(3) == 0 {
		s.editCron()
	}
}

// simCrons are the cron edits: valid Quartz expressions (seconds first,
// ? in one day field, L, #, W, years), and "" (triggers only). The protocol
// never evaluates them; the quiet phase checks that the runs carry the last
// one.
var simCrons = []string{
	"", "0/5 * * * * ?", "0 15 10 ? * MON-FRI", "0 0 12 * * ?", "0 0/30 8-17 * * ?",
	"0 0 0 L * ?", "0 30 9 ? * 2#1", "0 0 6 15W * ?", "0 0 0 1 1 ? 2099",
}

// editCron sets the cron to one of simCrons (drawn from the checks' own
// stream: the schedules of older seeds keep their steps).
func (s *sim) editCron() {
	value := simCrons[s.x.IntN(len(simCrons))]
	s.step("config cron=%q", value)
	ctx, cancel := s.call(s.adminCount)
	defer cancel()
	if err := withCause(ctx, s.h.Admin.SetConfig(ctx, simJob, jobconfig.FieldCron, value)); err != nil {
		s.violate("SetConfig cron=%q: %v", value, err)
		return
	}
	s.cron = value
}

// beginErrOK reports whether err is one Begin documents.
func beginErrOK(err error) bool {
	for _, e := range []error{protocol.ErrItemsRunning, protocol.ErrPaused, protocol.ErrShutdown, protocol.ErrClockSkew, protocol.ErrSessionLost, protocol.ErrBadConfig} {
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
	s.round++
	round := s.round
	for _, sv := range up {
		if sv.begin || sv.disconnected {
			continue
		}
		n++
		// No deadline of its own: a Begin may wait, legitimately, for a
		// leader cut off for several steps (on ZooKeeper its session, of
		// 30 s, outlives the cut); the sim ends it (a commit, a stop, the
		// quiet phase's bound).
		ctx, cancel := context.WithCancel(context.Background())
		sv.begin, sv.cancelBegin = true, cancel
		s.pending++
		job, st, gen := sv.job, sv.st, sv.gen
		claim, once := s.claims, s.once
		go func() {
			if claim {
				// As the Node does on SignalFailover: claim a queued
				// crashed item, which this Begin then runs.
				_, _ = job.ClaimFailover(ctx)
			}
			r, err := job.Begin(ctx, s.h.Now())
			res := beginResult{sv: sv, run: r, err: err, gen: gen, round: round}
			// The accounting of a run is done as it begins (a crash step
			// may come before the sim commits it).
			res.items = s.fo.began(res)
			if err == nil && once && len(r.Shards()) > 0 {
				res.onces = s.barriers(ctx, sv.id, st, r)
			}
			s.results <- res
		}()
	}
	s.step("trigger %d servers", n)
}

// onceTimeout is the barrier timeout of the sim's runs: fake time on
// memstore; on ZooKeeper, wall time a participant waits for a set that
// never completes (a server down, paused or cut off), so shorter.
func (s *sim) onceTimeout() time.Duration {
	if s.mem {
		return 3 * time.Second
	}
	return time.Second
}

// barriers takes run r through both distribute-once phases, as a pipeline
// does around its work; a phase that fails ends it.
func (s *sim) barriers(ctx context.Context, server string, st store.Store, r *protocol.Run) []*onceCall {
	var calls []*onceCall
	for _, phase := range []string{"started", "completed"} {
		c := &onceCall{phase: phase, server: server, total: r.Config().ShardingTotalCount}
		c.enter = s.ol.next()
		c.err = r.Once(ctx, phase, s.onceTimeout(), s.onceCallback(st, c))
		c.exit = s.ol.next()
		calls = append(calls, c)
		if c.err != nil {
			break
		}
	}
	return calls
}

// onceCallback is the callback of call c: it logs its start and reads the
// registrations it serves through the runner's session st.
func (s *sim) onceCallback(st store.Store, c *onceCall) func(context.Context) error {
	return func(ctx context.Context) error {
		c.ran = true
		s.ol.mu.Lock()
		s.ol.seq++
		s.ol.starts[c.phase] = append(s.ol.starts[c.phase], s.ol.seq)
		seq := s.ol.seq
		s.ol.mu.Unlock()
		s.blog.note(fmt.Sprintf("#%d callback of %s %s starts", seq, c.server, c.phase))
		base := store.Join("/"+s.h.NS, simJob, "guarantee", c.phase)
		kids, dst, err := st.Children(ctx, base)
		if err != nil {
			return nil // the runner's session went: nothing to read
		}
		for _, k := range kids {
			if it, err := strconv.Atoi(k); err != nil || it >= c.total {
				continue // the runner latch, or another total's run (not this set's)
			}
			ok, stat, err := st.Exists(ctx, store.Join(base, k))
			if err != nil || !ok || stat.Czxid >= dst.Mzxid {
				continue // made after the set was taken (the mark: recipe.Barrier): the next set's
			}
			key := fmt.Sprintf("%s/%s@%d", c.phase, k, stat.Czxid)
			s.ol.mu.Lock()
			if prev, dup := s.ol.served[key]; dup {
				s.ol.bad = append(s.ol.bad, fmt.Sprintf("distribute-once %s: the registration of item %s (zxid %d) served by two callbacks, %s's then %s's", c.phase, k, stat.Czxid, prev, c.server))
			}
			s.ol.served[key] = c.server
			s.ol.mu.Unlock()
		}
		return nil
	}
}

// onceCalls describes every Once call of the schedule: round, server,
// phase, [enter,exit] in the barrier sequence, ran, err.
func (s *sim) onceCalls() string {
	var out []string
	rounds := slices.Sorted(maps.Keys(s.rounds))
	for _, rd := range rounds {
		for _, res := range s.rounds[rd] {
			for _, c := range res.onces {
				out = append(out, fmt.Sprintf("r%d %s %s [%d,%d] ran=%v err=%v", rd, c.server, c.phase, c.enter, c.exit, c.ran, c.err))
			}
		}
	}
	return strings.Join(out, "; ")
}

// onceErrOK reports whether err is one a barrier participant may get (see
// Simulate).
func onceErrOK(err error) bool {
	for _, e := range []error{protocol.ErrGuaranteeTimeout, protocol.ErrSessionLost, context.Canceled, context.DeadlineExceeded, store.ErrConnectionLoss, store.ErrSessionExpired, store.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkOnce checks a run's barrier calls once they returned (Simulate).
func (s *sim) checkOnce(res beginResult) {
	for _, c := range res.onces {
		if c.err != nil {
			if !onceErrOK(c.err) {
				s.violate("Once %s on %s: %v", c.phase, c.server, c.err)
			}
			continue
		}
		if c.ran {
			continue
		}
		s.ol.mu.Lock()
		covered := slices.ContainsFunc(s.ol.starts[c.phase], func(seq int64) bool { return seq > c.enter && seq < c.exit })
		s.ol.mu.Unlock()
		if !covered {
			s.violate("distribute-once %s: %s's Once returned without a callback having run during it", c.phase, c.server)
		}
	}
}

// ledger is the failover accounting of a schedule (see Simulate); its
// methods are called from the sim and from the Begin goroutines.
type ledger struct {
	mu  sync.Mutex
	mem bool
	// lastRun: the last run of each item; cut: the items whose last run
	// was cut, and by what; required: those of them that must run again
	// (cut while failover and monitorExecution were on, item enabled and
	// within the total, and nothing switched that off since).
	lastRun  map[int]*itemRun
	cut      map[int]string
	required map[int]string
	// uncertain counts Begins that failed where the store may have
	// applied their transaction all the same (ZooKeeper: a lost reply).
	uncertain int
	// expiresAfter: a disconnect at least this long may have let the
	// store expire the session (0: never); cutOff: when each
	// disconnected server's disconnect began.
	expiresAfter          time.Duration
	cutOff                map[*simServer]time.Time
	failoverOn, monitorOn bool
	total                 int
	disabled              map[int]bool
	bad                   []string
}

// sessionEnds records that sv's session is about to end (crash, expiry):
// its runs triggered before and not completed are cut.
func (l *ledger) sessionEnds(sv *simServer, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sv.gen++
	for it, lr := range l.lastRun {
		if lr.sv == sv && !lr.completed && !lr.cut {
			l.markCut(it, lr, why)
		}
	}
}

// disconnected records that sv's disconnect begins.
func (l *ledger) disconnected(sv *simServer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutOff[sv] = time.Now()
}

// reconnected records that sv's disconnect ended: if it lasted long enough
// for the session to expire, sv's open runs may have been cut.
func (l *ledger) reconnected(sv *simServer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.longCut(sv) {
		for _, lr := range l.lastRun {
			if lr.sv == sv && !lr.completed && !lr.cut {
				lr.mayBeCut = true
			}
		}
	}
	delete(l.cutOff, sv)
}

// mayHaveExpired: lr's server was, or still is, disconnected long enough
// for its session to expire. mu held.
func (l *ledger) mayHaveExpired(lr *itemRun) bool {
	return lr.mayBeCut || (!lr.completed && l.longCut(lr.sv))
}

// longCut: sv is disconnected and has been for expiresAfter. mu held.
func (l *ledger) longCut(sv *simServer) bool {
	began, ok := l.cutOff[sv]
	return ok && l.expiresAfter > 0 && time.Since(began) >= l.expiresAfter
}

// markCut: mu held.
func (l *ledger) markCut(item int, lr *itemRun, why string) {
	lr.cut = true
	l.cut[item] = why
	if l.failoverOn && l.monitorOn && item < l.total && !l.disabled[item] {
		l.required[item] = why
	}
}

// edit follows a config edit before it is written: switched off (or the
// item gone), the items cut so far need not run again.
func (l *ledger) edit(field, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch field {
	case jobconfig.FieldFailover:
		l.failoverOn = value == "true"
		if !l.failoverOn {
			clear(l.required)
		}
	case jobconfig.FieldMonitorExecution:
		l.monitorOn = value == "true"
		if !l.monitorOn {
			clear(l.required)
		}
	case jobconfig.FieldShardingTotalCount:
		fmt.Sscan(value, &l.total)
		for it := range l.required {
			if it >= l.total {
				delete(l.required, it)
			}
		}
		for it := range l.disabled {
			if it >= l.total {
				delete(l.disabled, it) // pruned with the item's nodes
			}
		}
	}
}

func (l *ledger) setDisabled(item int, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.disabled[item] = on
	if on {
		delete(l.required, item)
	}
}

// began accounts for a Begin as it returns: a failover run must find its
// item's last run cut; any run ends the cut.
func (l *ledger) began(res beginResult) []*itemRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	if res.err != nil {
		if uncertainBegin(l.mem, res.err) {
			l.uncertain++
		}
		return nil
	}
	var runs []*itemRun
	cfg := res.run.Config()
	for _, a := range res.run.Shards() {
		if a.Failover && (!cfg.Failover || !cfg.MonitorsExecution()) {
			// docs/configuration.md: no failover with either off (with
			// monitorExecution off nothing keeps the item's owner from
			// running it beside the failover run).
			l.bad = append(l.bad, fmt.Sprintf("item %d: failover run on %s on a config with failover=%t monitorExecution=%t", a.Item, res.sv.id, cfg.Failover, cfg.MonitorsExecution()))
		}
		if _, ok := l.cut[a.Item]; a.Failover && !ok {
			lr := l.lastRun[a.Item]
			switch {
			case lr != nil && l.uncertain > lr.uncertain, lr == nil && l.uncertain > 0:
				// A Begin whose reply may have been lost since.
			case lr != nil && lr.unmonitored:
			case lr != nil && l.mayHaveExpired(lr):
			case lr == nil:
				l.bad = append(l.bad, fmt.Sprintf("item %d: failover run on %s, but the item never ran before", a.Item, res.sv.id))
			default:
				what := "completed"
				if !lr.completed {
					what = "not cut by a crash or expiry"
				}
				l.bad = append(l.bad, fmt.Sprintf("item %d: failover run on %s, but its last run (on %s%s) was %s: a second failover run, or one nothing called for", a.Item, res.sv.id, lr.sv.id, failoverMark(lr.failover), what))
			}
		}
		delete(l.cut, a.Item)
		delete(l.required, a.Item)
		lr := &itemRun{sv: res.sv, gen: res.gen, failover: a.Failover, uncertain: l.uncertain, unmonitored: !res.run.Config().MonitorsExecution()}
		l.lastRun[a.Item] = lr
		runs = append(runs, lr)
	}
	return runs
}

// completed records the outcome of a run's Complete: a run not completed
// whose server's session ended after its trigger (a crash or expiry step
// while it was open) is cut.
func (l *ledger) completed(res beginResult, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lr := range res.items {
		lr.completed = ok
		item := res.run.Shards()[i].Item
		if !ok && !lr.cut && res.sv.gen != lr.gen && l.lastRun[item] == lr {
			l.markCut(item, lr, "the end of "+res.sv.id+"'s session during the run")
		}
	}
}

// requiredItems returns the items that must still run again, in order,
// with what cut them.
func (l *ledger) requiredItems() ([]int, map[int]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.required)), maps.Clone(l.required)
}

// commitOpen commits the open triggers whose Begin returned; with wait it
// goes on until every open Begin returned (bounded: a Begin may wait for
// the leader's reshard, which waits for the runs committed here).
func (s *sim) commitOpen(wait bool) {
	timeout := time.After(s.bound())
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
			s.violate("%d Begins still waiting after %v", s.pending, s.bound())
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
	s.rounds[res.round] = append(s.rounds[res.round], res)
	if res.err != nil {
		s.step("begin %s: %v", sv.id, res.err)
		if !beginErrOK(res.err) && !errors.Is(res.err, context.Canceled) {
			s.violate("Begin on %s: %v", sv.id, res.err)
		}
		return
	}
	r := res.run
	s.step("commit %s %v", sv.id, r.Shards())
	s.checkOnce(res)
	octx, ocancel := s.call(sv.count)
	defer ocancel()
	if sv.crashed || sv.disconnected && !s.mem {
		// A crashed server's checks, and on ZooKeeper a cut-off server's
		// (each waits for a connection the step will not bring back: the
		// whole bound, 20 s, for nothing), get a short bound. On memstore
		// a cut-off server's keep the usual one: fake time, and the
		// schedules' clocks stay as the seeds found them.
		var cancel context.CancelFunc
		octx, cancel = context.WithTimeout(octx, time.Second)
		defer cancel()
	}
	for _, a := range r.Shards() {
		err := withCause(octx, r.CheckOwnership(octx, a.Item))
		if err != nil {
			if !errors.Is(err, protocol.ErrNotOwner) && !errors.Is(err, protocol.ErrSessionLost) {
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
	cctx := octx
	if sv.disconnected && !sv.crashed {
		if !s.mem {
			cctx = context.Background() // its own 2 s, not what the checks left
		}
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, 2*time.Second)
		defer cancel()
	}
	err := withCause(cctx, r.Complete(cctx, time.Time{}))
	if err != nil && !errors.Is(err, protocol.ErrSessionLost) && !errors.Is(err, protocol.ErrNotOwner) {
		s.violate("Complete %s: %v", sv.id, err)
	}
	s.fo.completed(res, err == nil)
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
		sv.crashed = true
		defer func() { sv.crashed = false }()
		s.h.B.Kill(s.t, sv.st)
	} else if sv.disconnected {
		// A graceful leave needs the store: reconnect first.
		s.reconnect(sv)
	}
	if crash && !s.mem {
		// A killed process is gone, its goroutines with it: its store is
		// closed at once, so that what they were doing fails now instead
		// of waiting on the cut connection (a call without a deadline
		// waits out the client's handshake timeouts, 10 s each). The
		// store's and the registry's closes run beside the schedule
		// (stopAll waits for them): the client's Close waits out
		// go-zookeeper's second for the close request's reply.
		reg, st := sv.reg, sv.st
		closed := make(chan struct{})
		s.closing.Go(func() { _ = st.Close(); close(closed) })
		s.await(sv)
		s.closing.Go(func() {
			<-closed
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = reg.Close(ctx)
		})
		sv.job, sv.reg, sv.st = nil, nil, nil
		return
	}
	// A Begin still waiting ends with the server: its ctx is cancelled.
	s.await(sv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if !s.mem {
		cancel()
		ctx, cancel = s.call(sv.count) // a leave's requests take the machine's time
	}
	defer cancel()
	if err := withCause(ctx, sv.reg.Close(ctx)); err != nil && !crash && !sv.disconnected {
		s.violate("Close %s: %v", sv.id, err)
	}
	_ = sv.st.Close()
	sv.job, sv.reg, sv.st = nil, nil, nil
}

// reconnect ends sv's disconnect (the ledger learns how long it lasted).
func (s *sim) reconnect(sv *simServer) {
	s.h.B.Reconnect(s.t, sv.st)
	s.fo.reconnected(sv)
	sv.disconnected = false
}

func (s *sim) stopAll() {
	for _, sv := range s.servers {
		if sv.job != nil {
			if sv.disconnected {
				s.reconnect(sv)
			}
			s.stop(sv, false)
		}
	}
	if s.skewed {
		s.h.B.SkewServerClock(s.t, 0)
	}
	s.closing.Wait()
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
			s.reconnect(sv)
		}
	}
	// Healing first: an open Begin may wait for a leader that is still
	// re-registering after an expiry (real seconds on ZooKeeper: seed
	// 500043), and the Begins' bound starts once the faults are over.
	s.awaitHealed()
	s.commitOpen(true)
	var last string
	// A failover claim takes one item, and a run with claimed items runs
	// only those: a crashed server's items may take a trigger each.
	required, _ := s.fo.requiredItems()
	for range simQuietTriggers + len(required) {
		s.trigger(s.up())
		s.commitOpen(true)
		if last = s.settled(); last == "" {
			s.checkOnceRound()
			s.checkQuietTrigger()
			return
		}
	}
	s.violate("not settled after %d quiet triggers: %s", simQuietTriggers+len(required), last)
}

// checkQuietTrigger checks, on memstore (each step settled: every tree
// cache current) with the stored config unmonitored, that a trigger in
// the settled state writes nothing (coord/protocol/quiet.go): after one
// more trigger (which may write: a Begin whose plan changed since the
// last that wrote), the next one sends no write request on any server,
// and the state stays settled. Not checked with the distribute-once
// barrier on (its registrations are writes of the runs that call it) or
// with the clock check on (maxTimeDiffSeconds > 0: a Set per Begin).
func (s *sim) checkQuietTrigger() {
	s.fo.mu.Lock()
	monitor := s.fo.monitorOn
	s.fo.mu.Unlock()
	if !s.mem || s.once || monitor {
		return
	}
	s.step("quiet: an unmonitored trigger writes nothing")
	s.trigger(s.up())
	s.commitOpen(true)
	up := s.up()
	before := make([]storecount.Counts, len(up))
	for i, sv := range up {
		before[i] = sv.count.Counts()
	}
	s.trigger(up)
	s.commitOpen(true)
	for _, res := range s.rounds[s.round] {
		if res.err == nil && res.run.Config().MaxTimeDiff > 0 {
			return
		}
	}
	for i, sv := range up {
		if w := sv.count.Counts().Sub(before[i]).Writes; w > 0 {
			s.violate("unmonitored trigger in the settled state: %s sent %d write requests, want none", sv.id, w)
		}
	}
	if last := s.settled(); last != "" {
		s.violate("unsettled by an unmonitored trigger: %s", last)
	}
}

// bound is how long the quiet phase waits for the open Begins and for the
// healing (up servers connected and registered, stopped ones offline)
// before it reports a violation. On memstore it is fake time (a hang costs
// nothing and is found at once); on ZooKeeper it bounds a hang, not a
// latency: with sessions that only the schedule's faults end, the waits
// are for states that follow in milliseconds, and 60 s is far beyond
// anything a loaded 2-core machine takes.
func (s *sim) bound() time.Duration {
	if s.mem {
		return 10 * time.Second
	}
	return 60 * time.Second
}

// awaitHealed waits until the healed faults have run their course: every
// up server connected and registered on its session, and every stopped
// server offline: a crashed one's session expired, and a graceful leave's
// too when its close did not reach the service (a cut connection). On memstore
// this holds at once; on ZooKeeper expiries and re-registrations take real
// time, and triggers before them would count against the quiet bound.
func (s *sim) awaitHealed() {
	deadline := time.Now().Add(s.bound())
	for {
		why := s.unhealed()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.violate("not healed after %v: %s", s.bound(), why)
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
	ctx, cancel := s.call(s.adminCount)
	defer cancel()
	st, err := s.h.Admin.Status(ctx, simJob)
	if err != nil {
		return fmt.Sprintf("status: %v", withCause(ctx, err))
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
	ctx, cancel := s.call(s.adminCount)
	defer cancel()
	st, err := s.h.Admin.Status(ctx, simJob)
	if err != nil {
		return fmt.Sprintf("status: %v", withCause(ctx, err))
	}
	// The times the status takes from run records are the items' own.
	if err := CheckItemTimes(ctx, s.h.AdminStore, s.h.NS, simJob, st); err != nil {
		return "status times: " + withCause(ctx, err).Error()
	}
	registered := false
	for _, ss := range st.Servers {
		registered = registered || ss.Status != "OFFLINE"
	}
	if st.ReshardingPending && registered {
		// With no server registered nobody reshards until one joins.
		var states []string
		for _, ss := range st.Servers {
			states = append(states, fmt.Sprintf("%s %s disabled=%v shutdown=%v paused=%v", ss.ID, ss.Status, ss.Disabled, ss.Shutdown, ss.Paused))
		}
		return fmt.Sprintf("resharding flag still up (leader %q; servers: %s)", st.Leader, strings.Join(states, ", "))
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
	for _, res := range s.rounds[s.round] {
		if res.err != nil {
			continue
		}
		if c := res.run.Config(); c.Cron != s.cron || c.ShardingTotalCount != s.total {
			return fmt.Sprintf("%s's run carries cron %q and total %d; stored: %q and %d", res.sv.id, c.Cron, c.ShardingTotalCount, s.cron, s.total)
		}
	}
	if len(live) > 0 {
		paused := map[string]bool{}
		for _, ss := range live {
			paused[ss.ID] = ss.Paused
		}
		claimedBy := map[int]string{}
		for _, is := range st.Items {
			claimedBy[is.Item] = is.Failover
		}
		items, why := s.fo.requiredItems()
		for _, it := range items {
			if c := claimedBy[it]; c == "" && paused[owner[it]] {
				continue // its owner is paused: it runs when resumed
			}
			return fmt.Sprintf("item %d has not run again since %s (failover on; owner %s, failover claim %q)", it, why[it], owner[it], claimedBy[it])
		}
	}
	s.status = st
	return ""
}

// checkOnceRound checks the barrier on the last quiet trigger (memstore
// only, see Simulate): when its runs cover every runnable item, each phase
// ran exactly one callback and no participant failed.
func (s *sim) checkOnceRound() {
	if !s.once || !s.mem {
		return
	}
	runnable := map[int]bool{}
	for _, is := range s.status.Items {
		if is.Item < s.total && !is.Disabled {
			runnable[is.Item] = true
		}
	}
	var calls []*onceCall
	for _, res := range s.rounds[s.round] {
		if res.err != nil {
			return // a participant did not begin
		}
		for _, a := range res.run.Shards() {
			delete(runnable, a.Item)
		}
		calls = append(calls, res.onces...)
	}
	if len(runnable) > 0 {
		return // not every item ran: the set cannot complete
	}
	for _, phase := range []string{"started", "completed"} {
		// Every participant registered while the others waited: a run
		// can wait for a run of the same trigger (a failover run holds
		// the reshard the others' Begins wait for; it times out first,
		// as documented), and then the set is not one.
		var lastEnter, firstExit int64 = 0, 1 << 62
		n := 0
		for _, c := range calls {
			if c.phase == phase {
				lastEnter, firstExit = max(lastEnter, c.enter), min(firstExit, c.exit)
				n++
			}
		}
		if lastEnter > firstExit || n == 0 {
			continue
		}
		ran := 0
		for _, c := range calls {
			if c.phase != phase {
				continue
			}
			if c.err != nil {
				s.violate("distribute-once %s: %s's Once failed on a round that covered every item: %v", phase, c.server, c.err)
			}
			if c.ran {
				ran++
			}
		}
		if ran != 1 {
			var desc []string
			for _, c := range calls {
				if c.phase == phase {
					desc = append(desc, fmt.Sprintf("%s [%d,%d] ran=%v err=%v", c.server, c.enter, c.exit, c.ran, c.err))
				}
			}
			s.violate("distribute-once %s: %d callbacks on the last quiet trigger, which covered every item; want 1 (calls: %s)", phase, ran, strings.Join(desc, "; "))
		}
	}
}

// uncertainBegin reports whether a failed Begin may have marked its items
// running all the same: on ZooKeeper a lost connection or a cancelled ctx
// can lose the reply of a transaction the server applied. On memstore a
// failed call applies nothing.
func uncertainBegin(mem bool, err error) bool {
	if mem {
		return false
	}
	for _, e := range []error{store.ErrConnectionLoss, store.ErrSessionExpired, store.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

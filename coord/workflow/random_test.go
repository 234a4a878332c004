package workflow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// TestRandomSchedules drives the diamond a -> {b, c} -> d (4 items each)
// from three sessions at once with seeded random schedules, as dataflow
// runs a job in a workflow: each server takes items (one owner per item at
// a time, as the job protocol guarantees), picks its workflow run, makes
// each item's work in simBatches commits (a streaming item commits batch
// after batch) and records the items' completion after its run; or it
// "crashes" at a random commit, recording nothing: the items are cut and
// run again later in the same workflow run. The first job fires now and
// then. Invariants, checked as it goes and at the end: Pick never hands
// out an item already completed in the workflow run it returns; no item of
// a step begins before every step it depends on is decided, each of their
// items recorded after a run that made all its commits; every step is
// started at most once per workflow run, and only once every step it
// depends on is decided; once the servers stop crashing, every workflow
// run completes, with each step's items recorded once, each item's last
// run the one that recorded it and made all its commits, and every run
// of it before that one cut (the duplicates the design allows: a cut
// item runs again; counted).
func TestRandomSchedules(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomSchedule(t, uint64(seed)) })
	}
}

// TestWorkflowSimulation is make sim's workflow part: SIM_SCHEDULES
// seeds from SIM_SEED on, each running randomSchedule (the workflow layer
// from three sessions racing) and faultSchedule (a diamond or a chain on
// the job protocol under crashes, expiries, disconnects and pauses), a
// violation when either fails; the last line is "workflow: schedules=K
// violations=V seed=N runs=R repeated=D refused=F unowned=U" (R workflow
// runs of the fault schedules, D item runs in them that repeated a cut
// item's commits, F late commits the sink's fence refused, U records the
// run's ownership fence refused).
// SIM_SEED=N SIM_SCHEDULES=1 replays seed N.
func TestWorkflowSimulation(t *testing.T) {
	k, _ := strconv.Atoi(os.Getenv("SIM_SCHEDULES"))
	if k <= 0 {
		t.Skip("make sim runs it (SIM_SCHEDULES)")
	}
	seed, _ := strconv.ParseUint(os.Getenv("SIM_SEED"), 10, 64)
	violations, runs, repeated, refused, unowned := 0, 0, 0, 0, 0
	begun := time.Now()
	for i := range uint64(k) {
		if !t.Run(fmt.Sprint(seed+i), func(t *testing.T) {
			randomSchedule(t, seed+i)
			r, d, f, u := faultSchedule(t, seed+i)
			runs, repeated, refused, unowned = runs+r, repeated+d, refused+f, unowned+u
		}) {
			violations++
			fmt.Printf("violation: seed=%d\n", seed+i)
		}
		// A long campaign says how far it got, on stdout at once, as the
		// protocol simulation does (coord/protocol's runSim).
		if n := i + 1; n%100 == 0 && n < uint64(k) {
			fmt.Printf("progress: workflow schedules=%d/%d violations=%d seed=%d elapsed=%v\n", n, k, violations, seed, time.Since(begun).Round(time.Second))
		}
	}
	fmt.Printf("workflow: schedules=%d violations=%d seed=%d runs=%d repeated=%d refused=%d unowned=%d\n", k, violations, seed, runs, repeated, refused, unowned)
}

// simBatches is the number of commits an item's work makes in the
// schedules (a streaming item's batches).
const simBatches = 2

// itemRun is one run of an item in one workflow run: its commits so far,
// and how it ended (recorded; cut: a crash before its record).
type itemRun struct {
	commits  int
	recorded bool
	cut      bool
}

func randomSchedule(t *testing.T, seed uint64) {
	const total, servers, actions = 4, 3, 100
	srv := memstore.NewServer()
	sessions := make([]store.Store, servers)
	for i := range sessions {
		sessions[i] = srv.Connect()
	}
	diamond(t, sessions[0], total, "")
	ctx := context.Background()
	jobs := map[string][]string{"a": nil, "b": {"a"}, "c": {"a"}, "d": {"b", "c"}}
	names := []string{"a", "b", "c", "d"}

	var mu sync.Mutex
	owned := map[string]bool{}      // job|item held by a server now
	started := map[string]int{}     // run|job started by a Record
	runs := map[string][]*itemRun{} // run|job|item: its runs, oldest first
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	key := func(run, job string, item int) string { return run + "|" + job + "|" + strconv.Itoa(item) }
	take := func(r *rand.Rand, job string) []int {
		mu.Lock()
		defer mu.Unlock()
		var items []int
		for i := range total {
			if !owned[job+"|"+strconv.Itoa(i)] && r.IntN(2) == 0 {
				owned[job+"|"+strconv.Itoa(i)] = true
				items = append(items, i)
			}
		}
		return items
	}
	release := func(job string, items []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range items {
			delete(owned, job+"|"+strconv.Itoa(i))
		}
	}
	// note counts the steps a record started in run.
	note := func(run string, got []string, st store.Store) {
		for _, j := range got {
			mu.Lock()
			started[run+"|"+j]++
			n := started[run+"|"+j]
			mu.Unlock()
			if n > 1 {
				fail("%s: %s started %d times", run, j, n)
			}
			for _, up := range jobs[j] {
				if s, _, err := workflow.ReadStep(ctx, st, ns, up, run); err != nil || !s.Decided() {
					fail("%s: %s started before %s was decided (%+v, %v)", run, j, up, s, err)
				}
			}
		}
	}
	// begin checks that item of job may begin in run: every step it
	// depends on decided, each of its items recorded after a run of it
	// that made all its commits.
	begin := func(st store.Store, run, job string, item int) {
		for _, up := range jobs[job] {
			if s, _, err := workflow.ReadStep(ctx, st, ns, up, run); err != nil || !s.Decided() {
				fail("%s: item %d of %s began before %s was decided (%+v, %v)", run, item, job, up, s, err)
				continue
			}
			for i := range total {
				mu.Lock()
				rs := runs[key(run, up, i)]
				ok := len(rs) > 0 && rs[len(rs)-1].recorded && rs[len(rs)-1].commits == simBatches
				mu.Unlock()
				if !ok {
					fail("%s: item %d of %s began with item %d of %s not recorded after all its commits (%d runs)", run, item, job, i, up, len(rs))
				}
			}
		}
	}
	step := func(r *rand.Rand, st store.Store, crash, fires bool) {
		job := names[r.IntN(len(names))]
		items := take(r, job)
		defer release(job, items)
		if len(items) == 0 {
			return
		}
		steps := workflow.ForJob(st, ns, job)
		fire := fires && job == "a" && r.IntN(4) == 0
		pick, err := steps.Pick(ctx, items, jobs[job], fire, total)
		if err != nil {
			fail("Pick %s %v: %v", job, items, err)
			return
		}
		if pick.Run == "" {
			return
		}
		done, _, err := st.Children(ctx, store.Join(ns, job, "workflow", "runs", pick.Run, "items"))
		if err != nil {
			fail("%v", err)
			return
		}
		for _, i := range pick.Items {
			if slices.Contains(done, strconv.Itoa(i)) {
				fail("%s: Pick handed out item %d of %s, completed in it already", pick.Run, i, job)
			}
		}
		// The items' work, simBatches commits each, item after item; a
		// crash cuts it at a random commit (before the first: none made;
		// after the last: all made) and records nothing.
		commits := len(pick.Items) * simBatches
		if crash {
			commits = r.IntN(commits + 1)
		}
		mine := map[int]*itemRun{}
		for _, i := range pick.Items {
			begin(st, pick.Run, job, i)
			ir := &itemRun{cut: crash}
			mine[i] = ir
			mu.Lock()
			runs[key(pick.Run, job, i)] = append(runs[key(pick.Run, job, i)], ir)
			mu.Unlock()
			for range simBatches {
				if commits == 0 {
					break
				}
				commits--
				mu.Lock()
				ir.commits++
				mu.Unlock()
			}
		}
		if crash {
			return
		}
		outs := map[int]string{}
		for _, i := range pick.Items {
			outs[i] = ""
		}
		// Marked before the record commits: a step it completes may
		// start at once, and its items begin on other sessions.
		mu.Lock()
		for _, ir := range mine {
			ir.recorded = true
		}
		mu.Unlock()
		got, err := steps.Record(ctx, pick.Run, outs)
		if err != nil {
			fail("Record %s %s: %v", job, pick.Run, err)
			return
		}
		note(pick.Run, got, st)
	}
	var wg sync.WaitGroup
	for s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(s)))
			for range actions {
				step(r, sessions[s], r.IntN(5) == 0, true)
			}
		}()
	}
	wg.Wait()
	// No more crashes and no more fires: every open step's items are
	// taken until every workflow run is complete.
	r := rand.New(rand.NewPCG(seed, 99))
	for range 2000 {
		step(r, sessions[0], false, false)
		if r.IntN(4) == 0 && noneOpen(t, sessions[0], names) {
			break
		}
	}
	wruns, err := workflow.Runs(ctx, sessions[0], ns, "a", workflow.KeepRuns)
	if err != nil {
		t.Fatal(err)
	}
	repeated := 0
	for _, rs := range wruns {
		for _, s := range rs.Steps {
			items, _, err := sessions[0].Children(ctx, store.Join(ns, s.Job, "workflow", "runs", rs.Run, "items"))
			if s.State != workflow.StateSucceeded || err != nil || len(items) != total || s.Completed != total {
				t.Errorf("seed %d: %s: step %+v with items %v (%v), want succeeded with %d items", seed, rs.Run, s, items, err, total)
			}
			for i := range total {
				irs := runs[key(rs.Run, s.Job, i)]
				for k, ir := range irs {
					last := k == len(irs)-1
					switch {
					case last && (!ir.recorded || ir.commits != simBatches):
						t.Errorf("seed %d: %s: item %d of %s: its last run (%d of %d) %+v, want recorded after %d commits", seed, rs.Run, i, s.Job, k+1, len(irs), *ir, simBatches)
					case !last && !ir.cut:
						t.Errorf("seed %d: %s: item %d of %s ran again after run %d of %d, which was not cut (%+v)", seed, rs.Run, i, s.Job, k+1, len(irs), *ir)
					case !last && ir.commits > 0:
						repeated++
					}
				}
				if len(irs) == 0 {
					t.Errorf("seed %d: %s: item %d of %s never ran", seed, rs.Run, i, s.Job)
				}
			}
			if s.Job != "a" && started[rs.Run+"|"+s.Job] != 1 {
				t.Errorf("seed %d: %s: %s started %d times", seed, rs.Run, s.Job, started[rs.Run+"|"+s.Job])
			}
		}
	}
	if len(wruns) == 0 {
		t.Errorf("seed %d: no workflow run started", seed)
	}
	for _, e := range errs {
		t.Errorf("seed %d: %s", seed, e)
	}
	if t.Failed() {
		t.Logf("seed %d: %d workflow runs; %d item runs cut after a commit and run again (the duplicates the design allows)", seed, len(wruns), repeated)
	}
}

// noneOpen reports whether no step of jobs is open (running) in any
// workflow run: then none is pending either (a step whose upstream steps
// are all decided is started or stopped in the transaction deciding the
// last of them), and every workflow run is decided, as the check after
// the drain verifies step by step. One listing a job, where reading every
// workflow run's steps took a fifth of the schedule's CPU.
func noneOpen(t *testing.T, st store.Store, jobs []string) bool {
	for _, j := range jobs {
		open, err := workflow.ForJob(st, ns, j).Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(open) > 0 {
			return false
		}
	}
	return true
}

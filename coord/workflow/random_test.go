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

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// TestRandomSchedules drives the diamond a -> {b, c} -> d (4 items each)
// from three sessions at once with seeded random schedules: each server
// takes items (one owner per item at a time, as the job protocol
// guarantees), picks its workflow run, and then either records the items
// or "crashes" (records nothing: the items are cut and taken again later),
// and the first job fires now and then. Invariants, checked as it goes
// and at the end: Pick never hands out an item already completed in the
// workflow run it returns; every step is started at most once per
// workflow run, and only once every step it depends on is decided; once
// the servers stop crashing, every workflow run completes, with each
// step's items recorded exactly once.
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
// random schedules (randomSchedule) from seed SIM_SEED on, each a
// violation when any invariant fails; the last line is
// "workflow: schedules=K violations=V seed=N".
func TestWorkflowSimulation(t *testing.T) {
	k, _ := strconv.Atoi(os.Getenv("SIM_SCHEDULES"))
	if k <= 0 {
		t.Skip("make sim runs it (SIM_SCHEDULES)")
	}
	seed, _ := strconv.ParseUint(os.Getenv("SIM_SEED"), 10, 64)
	violations := 0
	for i := range uint64(k) {
		if !t.Run(fmt.Sprint(seed+i), func(t *testing.T) { randomSchedule(t, seed+i) }) {
			violations++
		}
	}
	fmt.Printf("workflow: schedules=%d violations=%d seed=%d\n", k, violations, seed)
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
	owned := map[string]bool{}  // job|item held by a server now
	started := map[string]int{} // run|job started by a Record
	effects := map[string]int{} // run|job|item: commits through a fence
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
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
		for run, got := range pick.Started {
			note(run, got, st)
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
		// The items' effects, each committed through its fence; a crash
		// before (commit 0) or after (all) the commits records nothing.
		commit := len(pick.Items)
		if crash {
			commit = r.IntN(len(pick.Items) + 1)
		}
		for _, i := range pick.Items[:commit] {
			err := steps.Fence(ctx, pick.Run, i, func(ctx context.Context, ops ...store.Op) error {
				_, err := st.Multi(ctx, ops...)
				return err
			})
			if err != nil {
				fail("%s: fence of item %d of %s: %v", pick.Run, i, job, err)
				continue
			}
			for _, up := range jobs[job] {
				if s, _, err := workflow.ReadStep(ctx, st, ns, up, pick.Run); err != nil || !s.Decided() {
					fail("%s: item %d of %s committed before %s was decided (%+v, %v)", pick.Run, i, job, up, s, err)
				}
			}
			mu.Lock()
			effects[pick.Run+"|"+job+"|"+strconv.Itoa(i)]++
			mu.Unlock()
		}
		if crash {
			return
		}
		outs := map[int]string{}
		for _, i := range pick.Items {
			outs[i] = ""
		}
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
		if r.IntN(4) == 0 && allDecided(t, sessions[0]) {
			break
		}
	}
	runs, err := workflow.Runs(ctx, sessions[0], ns, "a", workflow.KeepRuns)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range runs {
		for _, s := range rs.Steps {
			items, _, err := sessions[0].Children(ctx, store.Join(ns, s.Job, "workflow", "runs", rs.Run, "items"))
			if s.State != workflow.StateSucceeded || err != nil || len(items) != total || s.Completed != total {
				t.Errorf("seed %d: %s: step %+v with items %v (%v), want succeeded with %d items", seed, rs.Run, s, items, err, total)
			}
			for i := range total {
				if n := effects[rs.Run+"|"+s.Job+"|"+strconv.Itoa(i)]; n != 1 {
					t.Errorf("seed %d: %s: item %d of %s committed %d times, want once", seed, rs.Run, i, s.Job, n)
				}
			}
			if s.Job != "a" && started[rs.Run+"|"+s.Job] != 1 {
				t.Errorf("seed %d: %s: %s started %d times", seed, rs.Run, s.Job, started[rs.Run+"|"+s.Job])
			}
		}
	}
	if len(runs) == 0 {
		t.Errorf("seed %d: no workflow run started", seed)
	}
	for _, e := range errs {
		t.Errorf("seed %d: %s", seed, e)
	}
}

func allDecided(t *testing.T, st store.Store) bool {
	runs, err := workflow.Runs(context.Background(), st, ns, "a", workflow.KeepRuns)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range runs {
		for _, s := range rs.Steps {
			if !s.Decided() {
				return false
			}
		}
	}
	return true
}

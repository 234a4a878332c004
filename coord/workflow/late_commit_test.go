package workflow_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/workflow"
)

// TestLateCommitIsRefusedByTheSinkFence is the interleaving of workflow
// simulation seed 51001084 ("a commit of item 0 of b accepted after an
// item of a step after it began"), scripted on the fault simulation's own
// runs: a run of b's item passes its CheckOwnership for its second commit
// and stops before writing it; its server crashes; the item's next run,
// on the other server, makes both commits and records the item, which
// decides b's step and starts c's, and c's item begins; only then does
// the first run's write arrive. The check answered for its moment, before
// the item moved: the write is the late commit of a run that no longer
// owns the item, and the sink, fencing in its own transaction, refuses it
// (the item's next run committed a newer epoch). Counted as accepted, as
// the simulation did before, it is the seed's violation.
func TestLateCommitIsRefusedByTheSinkFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		// a's item runs where it is assigned and starts workflow run
		// a-0000000001, whose record starts b's step.
		s := chainAfterA(t, 51001084)
		defer s.stopAll()
		run := workflow.RunID("a", 1)
		if st, _, err := workflow.ReadStep(ctx, s.h.AdminStore, s.h.NS, "b", run); err != nil || st.State != workflow.StateRunning {
			t.Fatalf("b's step of %s: %+v, %v; want running", run, st, err)
		}

		// b's item begins on its owner, which commits its first batch;
		// its second commit's check passes, and the run stops right there.
		var mu sync.Mutex
		owner, held := "", false
		checked, write := make(chan struct{}), make(chan struct{})
		s.afterCheck = func(sid, job string, item int) {
			if job != "b" {
				return
			}
			mu.Lock()
			first := owner == ""
			if first {
				owner = sid
			}
			hold := !first && sid == owner && !held
			held = held || hold
			mu.Unlock()
			if hold {
				close(checked)
				<-write
			}
		}
		for _, sv := range s.servers[:2] {
			s.start(sv, "b", false, true)
		}
		synctest.Wait()
		s.release(true)
		<-checked
		synctest.Wait()

		// Its server crashes; the item's next run, on the other server,
		// makes both commits and records it: b is decided, c starts, and
		// c's item begins.
		w, o := s.servers[0], s.servers[1]
		mu.Lock()
		if owner == o.id {
			w, o = o, w
		}
		mu.Unlock()
		s.crash(w)
		s.start(o, "b", false, false)
		synctest.Wait()
		if st, _, err := workflow.ReadStep(ctx, s.h.AdminStore, s.h.NS, "b", run); err != nil || st.State != workflow.StateSucceeded {
			t.Fatalf("b's step of %s after its item's next run: %+v, %v; want succeeded", run, st, err)
		}
		s.start(o, "c", false, false)
		synctest.Wait()
		s.mu.Lock()
		began := s.began[run+"|b"]
		s.mu.Unlock()
		if !began {
			t.Fatalf("no item of c began in %s", run)
		}

		// Now the first run's write arrives.
		close(write)
		synctest.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.bad {
			t.Error(e)
		}
		if s.refused != 1 {
			t.Errorf("the sink's fence refused %d commits, want 1 (the late one)", s.refused)
		}
	})
}

// chainAfterA is the scripted tests' start: the chain a -> b -> c of one
// item each on the fault sim's first two servers, joined, and a run of a
// on each that starts workflow run a-0000000001 (b's step running). In a
// synctest bubble; the caller stops it (stopAll).
func chainAfterA(t *testing.T, seed uint64) *faultSim {
	s := newFaultSimOf(t, seed, rand.New(rand.NewPCG(1, 2)), map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}}, []string{"a", "b", "c"}, 1)
	for _, sv := range s.servers[:2] {
		s.join(sv)
	}
	synctest.Wait()
	for _, sv := range s.servers[:2] {
		s.start(sv, "a", true, false)
	}
	synctest.Wait()
	return s
}

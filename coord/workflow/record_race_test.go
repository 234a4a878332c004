package workflow_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/workflow"
)

// TestRecordAfterTheSessionEnded: a run of b's item makes both commits
// and checks its context (live, as dataflow's runOnce reads it before
// AfterAll and recordWorkflow); its server's session expires; the item's
// failover run (the same server, on its new session) picks it, not
// completed, and commits once; only then does the first run's record
// reach the store, which runs it on the new session. Unfenced, it decided
// b and started c, and the failover run's second commit, at the newest
// epoch, was one a fencing sink accepts after c's item began ("a commit
// of item 0 of b accepted after an item of a step after it began"). The
// record's transaction checks the run's ownership (Run.Fence: its live
// marker went with its session): it is refused (workflow.ErrNotOwner)
// and decides nothing; the failover run finishes the item and records
// it, and only that starts c, whose item then runs.
func TestRecordAfterTheSessionEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := chainAfterA(t, 1)
		defer s.stopAll()
		run := workflow.RunID("a", 1)
		var mu sync.Mutex
		owner := ""
		s.afterCheck = func(sid, job string, item int) {
			mu.Lock()
			if job == "b" && owner == "" {
				owner = sid
			}
			mu.Unlock()
		}
		recorded, write := make(chan struct{}), make(chan struct{})
		once := sync.Once{}
		s.beforeRecord = func(job string) {
			if job != "b" {
				return
			}
			hold := false
			once.Do(func() { hold = true })
			if hold {
				close(recorded)
				<-write
			}
		}
		for _, sv := range s.servers[:2] {
			s.start(sv, "b", false, false)
		}
		<-recorded
		synctest.Wait()
		x, o := s.servers[0], s.servers[1]
		mu.Lock()
		if owner == o.id {
			x, o = o, x
		}
		mu.Unlock()
		t.Logf("owner %s", x.id)
		s.h.B.Expire(t, x.st)
		synctest.Wait()
		for _, sv := range s.servers[:2] {
			s.start(sv, "b", false, true)
		}
		synctest.Wait()
		close(write)
		synctest.Wait()
		st, _, err := workflow.ReadStep(ctx, s.h.AdminStore, s.h.NS, "b", run)
		t.Logf("b after the cut run's record: %+v %v", st, err)
		if err != nil || st.State != workflow.StateRunning || st.Completed != 0 {
			t.Errorf("b's step after the record of the run whose session ended: %+v, %v; want running, nothing recorded", st, err)
		}
		s.mu.Lock()
		if s.unowned != 1 {
			t.Errorf("%d records refused by the run's ownership fence, want 1 (the cut run's)", s.unowned)
		}
		s.mu.Unlock()
		for _, sv := range s.servers[:2] {
			s.start(sv, "c", false, false)
		}
		synctest.Wait()
		s.release(true) // the failover run's second commit and its record
		synctest.Wait()
		for _, sv := range s.servers[:2] {
			s.start(sv, "c", false, false)
		}
		s.runs.Wait()
		synctest.Wait()
		for _, job := range []string{"b", "c"} {
			st, _, err := workflow.ReadStep(ctx, s.h.AdminStore, s.h.NS, job, run)
			if err != nil || st.State != workflow.StateSucceeded || st.Completed != st.Total {
				t.Errorf("%s's step at the end: %+v, %v; want succeeded with every item", job, st, err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.bad {
			t.Error(e)
		}
		for k, v := range s.attempts {
			t.Logf("%s: %d runs", k, len(v))
		}
	})
}

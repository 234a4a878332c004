package workflow_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/workflow"
)

// TestRecordAfterTheSessionEnded (skipped: it fails on an open protocol
// bug, docs/workflows.md "Not done yet"; unskip with the fix):
// a run of b's item makes both commits and checks its context (live, as
// dataflow's runOnce reads it before AfterAll and recordWorkflow); its
// server's session expires; the item's failover run (the same server, on
// its new session) picks it, not completed, and commits once; only then
// does the first run's record commit (Steps.Record is not fenced by the
// run's ownership, and the store runs it on the new session), deciding b
// and starting c; c's item begins; the failover run's second commit,
// at the newest epoch, is one a fencing sink accepts: after c began.
func TestRecordAfterTheSessionEnded(t *testing.T) {
	t.Skip("open: a run's workflow record is not fenced by its ownership (docs/workflows.md, Not done yet); this test fails until it is")
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
		t.Logf("b: %+v %v", st, err)
		for _, sv := range s.servers[:2] {
			s.start(sv, "c", false, false)
		}
		synctest.Wait()
		s.release(true)
		synctest.Wait()
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

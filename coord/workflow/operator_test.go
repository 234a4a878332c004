package workflow_test

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/workflow"
)

// startRun starts a's next workflow run of the diamond (total items).
func startRun(t *testing.T, st store.Store, total int) string {
	t.Helper()
	pick, err := workflow.ForJob(st, ns, "a").Pick(t.Context(), items(total), nil, true, total)
	if err != nil || pick.Run == "" {
		t.Fatalf("Pick = %+v, %v; want a new workflow run", pick, err)
	}
	return pick.Run
}

func record(t *testing.T, st store.Store, job, run string, out map[int]string) []string {
	t.Helper()
	started, err := workflow.ForJob(st, ns, job).Record(t.Context(), run, out)
	if err != nil {
		t.Fatal(err)
	}
	return started
}

func readRun(t *testing.T, st store.Store, run string) workflow.RunStatus {
	t.Helper()
	rs, err := workflow.ReadRun(t.Context(), st, ns, run)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestSkipPending: b skipped while a runs does not run; a's completion
// starts c alone, and c's starts d (a skipped step counts as succeeded,
// d's policy being stop).
func TestSkipPending(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	run := startRun(t, st, 2)
	started, err := workflow.Skip(ctx, st, ns, run, "b")
	if err != nil || len(started) != 0 {
		t.Fatalf("Skip(b) = %v, %v; want nothing started", started, err)
	}
	if s := state(t, st, "b", run); s.State != workflow.StateSkipped || s.Ended == 0 {
		t.Fatalf("b's step %+v, want skipped", s)
	}
	if got := record(t, st, "a", run, outcomes(items(2))); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("a's completion started %v, want [c] (b skipped)", got)
	}
	if got, err := workflow.ForJob(st, ns, "b").Pick(ctx, items(2), []string{"a"}, false, 2); err != nil || got.Run != "" {
		t.Fatalf("b's Pick = %+v, %v; want nothing (skipped)", got, err)
	}
	if got := record(t, st, "c", run, outcomes(items(2))); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("c's completion started %v, want [d]", got)
	}
}

// TestSkipFailed: b failed, so d stopped; skipping b starts d in the same
// workflow run, as mark-success does, and b shows skipped with its
// failed item still counted.
func TestSkipFailed(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	run := startRun(t, st, 2)
	record(t, st, "a", run, outcomes(items(2)))
	record(t, st, "b", run, outcomes(items(2), 1))
	record(t, st, "c", run, outcomes(items(2)))
	if s := state(t, st, "d", run); s.State != workflow.StateStopped {
		t.Fatalf("d's step %+v after b failed, want stopped", s)
	}
	started, err := workflow.Skip(ctx, st, ns, run, "b")
	if err != nil || !slices.Equal(started, []string{"d"}) {
		t.Fatalf("Skip(b) = %v, %v; want [d] started", started, err)
	}
	if s := state(t, st, "b", run); s.State != workflow.StateSkipped || s.Failed != 1 {
		t.Fatalf("b's step %+v, want skipped with its failed item counted", s)
	}
	if s := state(t, st, "d", run); s.State != workflow.StateRunning || s.Total != 2 {
		t.Fatalf("d's step %+v, want running", s)
	}
	if open, err := workflow.ForJob(st, ns, "d").Open(ctx); err != nil || !slices.Equal(open, []string{run}) {
		t.Fatalf("d's open runs %v, %v; want [%s]", open, err, run)
	}
}

// TestSkipRefusals: a running, succeeded or skipped step, a job not in
// the run, and a step whose next step was cancelled are refused with
// ErrSkip, and the run is unchanged.
func TestSkipRefusals(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	run := startRun(t, st, 2)
	refused := func(job string) {
		t.Helper()
		before := readRun(t, st, run)
		if started, err := workflow.Skip(ctx, st, ns, run, job); !errors.Is(err, workflow.ErrSkip) {
			t.Fatalf("Skip(%s) = %v, %v; want ErrSkip", job, started, err)
		} else {
			t.Logf("Skip(%s): %v", job, err)
		}
		if after := readRun(t, st, run); !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused Skip(%s) changed the run:\n%+v\n%+v", job, before, after)
		}
	}
	refused("a") // running
	refused("nope")
	record(t, st, "a", run, outcomes(items(2)))
	refused("a") // succeeded
	refused("b") // running
	if _, err := workflow.Skip(ctx, st, ns, run, "d"); err != nil {
		t.Fatal(err)
	}
	refused("d") // skipped already

	run2 := startRun(t, st, 2)
	record(t, st, "a", run2, outcomes(items(2), 0))
	if s := state(t, st, "b", run2); s.State != workflow.StateStopped {
		t.Fatalf("b's step %+v after a failed, want stopped", s)
	}
	if _, err := workflow.Cancel(ctx, st, ns, run2); !errors.Is(err, workflow.ErrCancel) {
		t.Fatalf("Cancel of a decided run: %v, want ErrCancel", err)
	}

	// b failed while c ran; the run cancelled: skipping b would start
	// nothing (d was cancelled).
	run = startRun(t, st, 2)
	record(t, st, "a", run, outcomes(items(2)))
	record(t, st, "b", run, outcomes(items(2), 0))
	if _, err := workflow.Cancel(ctx, st, ns, run); err != nil {
		t.Fatal(err)
	}
	refused("b")
}

// TestCancelDuringTheFirstStep: cancelled while a's items run, every step
// is cancelled; a's late record changes nothing and starts nothing, a's
// next fire starts a new workflow run, rerun from b is refused (a did not
// complete) and from a allowed; a second cancel is refused.
func TestCancelDuringTheFirstStep(t *testing.T) {
	st := memstore.NewServer().Connect()
	diamond(t, st, 2, "")
	ctx := t.Context()
	run := startRun(t, st, 2)
	record(t, st, "a", run, outcomes([]int{0}))
	was, err := workflow.Cancel(ctx, st, ns, run)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range was {
		got = append(got, s.Job+" "+s.State)
	}
	if want := []string{"a running", "b pending", "c pending", "d pending"}; !slices.Equal(got, want) {
		t.Fatalf("Cancel returned %v, want %v", got, want)
	}
	for _, j := range []string{"a", "b", "c", "d"} {
		if s := state(t, st, j, run); s.State != workflow.StateCancelled {
			t.Fatalf("%s's step %+v, want cancelled", j, s)
		}
	}
	if open, err := workflow.ForJob(st, ns, "a").Open(ctx); err != nil || len(open) != 0 {
		t.Fatalf("a's open runs %v, %v; want none", open, err)
	}
	if started := record(t, st, "a", run, outcomes([]int{1})); len(started) != 0 {
		t.Fatalf("a's late record started %v", started)
	}
	if s := state(t, st, "a", run); s.Completed != 1 {
		t.Fatalf("a's step %+v after a late record, want 1 completed still", s)
	}
	if next := startRun(t, st, 2); next == run {
		t.Fatalf("a's next fire served the cancelled run %s", run)
	}
	if _, err := workflow.Cancel(ctx, st, ns, run); !errors.Is(err, workflow.ErrCancel) {
		t.Fatalf("a second Cancel: %v, want ErrCancel", err)
	}
	if err := workflow.Rerun(ctx, st, ns, run, "b"); !errors.Is(err, workflow.ErrRerun) {
		t.Fatalf("rerun from b after a was cancelled: %v, want ErrRerun", err)
	}
	if err := workflow.Rerun(ctx, st, ns, run, "a"); err != nil {
		t.Fatalf("rerun from a: %v", err)
	}
	if s := state(t, st, "d", run); s.State != workflow.StatePending {
		t.Fatalf("d's step %+v after rerun from a, want pending", s)
	}
}

// TestCancelRacesTheJoin: b's and c's last items are recorded from two
// sessions while a third cancels the run, 100 times: whichever commits
// first, d ends cancelled with no open step (never started after the
// cancel, nor left running).
func TestCancelRacesTheJoin(t *testing.T) {
	srv := memstore.NewServer()
	sts := []store.Store{srv.Connect(), srv.Connect(), srv.Connect()}
	diamond(t, sts[0], 1, "")
	ctx := t.Context()
	for r := 0; r < 100; r++ {
		run := startRun(t, sts[0], 1)
		record(t, sts[0], "a", run, outcomes(items(1)))
		var wg sync.WaitGroup
		for i, j := range []string{"b", "c"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := workflow.ForJob(sts[i], ns, j).Record(ctx, run, outcomes(items(1))); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := workflow.Cancel(ctx, sts[2], ns, run); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		if s := state(t, sts[0], "d", run); s.State != workflow.StateCancelled {
			t.Fatalf("%s: d's step %+v, want cancelled", run, s)
		}
		if open, err := workflow.ForJob(sts[0], ns, "d").Open(ctx); err != nil || len(open) != 0 {
			t.Fatalf("%s: d's open runs %v, %v; want none", run, open, err)
		}
	}
}

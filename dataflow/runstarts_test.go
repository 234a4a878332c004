package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/internal/testwait"
)

// TestRunStartsEveryRunnerHasAStarter drives runStarts through random
// interleavings of pushes and of starters' takes: at every step, while
// runners are queued, a starter started that has not yet taken one is on
// its way (so no runner waits for another's run), the runners are taken
// oldest first, each once, and a starter is started only when none is on
// its way.
func TestRunStartsEveryRunnerHasAStarter(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var (
			q        runStarts
			starters []bool // per started starter: has it taken its first?
			alive    []int  // starters not yet exited
			pushed   int
			taken    int
			jobs     []*schedJob
		)
		start := func() {
			starters = append(starters, false)
			alive = append(alive, len(starters)-1)
		}
		for step := 0; step < 400 || len(alive) > 0; step++ {
			if step < 400 && rng.IntN(2) == 0 {
				j := &schedJob{name: fmt.Sprint(pushed)}
				jobs = append(jobs, j)
				pushed++
				if q.push(runStart{j: j, reason: ReasonCron}) {
					start()
				}
			} else if len(alive) > 0 {
				k := rng.IntN(len(alive))
				s := alive[k]
				rs, ok, more := q.take(!starters[s])
				starters[s] = true
				if !ok {
					alive = append(alive[:k], alive[k+1:]...)
				} else {
					if rs.j != jobs[taken] {
						t.Fatalf("seed %d: took runner %s, want the oldest, %s", seed, rs.j.name, jobs[taken].name)
					}
					taken++
				}
				if more {
					start()
				}
			}
			queued := pushed - taken
			unstarted := 0
			for _, s := range alive {
				if !starters[s] {
					unstarted++
				}
			}
			if queued > 0 && unstarted == 0 {
				t.Fatalf("seed %d step %d: %d runners queued, no starter on its way", seed, step, queued)
			}
			if q.unstarted != unstarted {
				t.Fatalf("seed %d step %d: unstarted = %d, want %d", seed, step, q.unstarted, unstarted)
			}
			if unstarted > 1 {
				t.Fatalf("seed %d step %d: %d starters on their way, one is enough", seed, step, unstarted)
			}
		}
		if taken != pushed {
			t.Fatalf("seed %d: %d runners taken of %d", seed, taken, pushed)
		}
		if len(starters) > pushed {
			t.Fatalf("seed %d: %d starters for %d runners", seed, len(starters), pushed)
		}
	}
}

// TestSchedulerBlockedRunHoldsNoOther: runners share starter goroutines,
// yet a run that blocks holds back no other job's run, whether they were
// due at the same instant or came after it.
func TestSchedulerBlockedRunHoldsNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(slog.New(slog.DiscardHandler))
		release := make(chan struct{})
		var ran atomic.Int32
		blocking := runOnly(func(ctx context.Context, _ Reason) {
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		quick := runOnly(func(context.Context, Reason) { ran.Add(1) })
		if err := s.add("block", "", false, blocking); err != nil {
			t.Fatal(err)
		}
		const others = 20
		for i := range others {
			if err := s.add(fmt.Sprint("quick", i), "", false, quick); err != nil {
				t.Fatal(err)
			}
		}
		due := []*schedJob{s.jobs["block"]}
		for i := range others {
			due = append(due, s.jobs[fmt.Sprint("quick", i)])
		}
		s.fire(time.Now(), due...) // the blocking job first
		synctest.Wait()
		if got := ran.Load(); got != others {
			t.Fatalf("%d of the %d runs due beside a blocked run ran", got, others)
		}
		for i := range others {
			if err := s.trigger(fmt.Sprint("quick", i), ReasonTrigger); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if got := ran.Load(); got != 2*others {
			t.Fatalf("%d of the %d runs triggered during a blocked run ran", got-others, others)
		}
		close(release)
		if err := s.stop(t.Context(), false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSchedulerStopLeavesNoStarter: once stop returns, no starter
// goroutine is left running, not even one started for runners that other
// starters took (it finds none queued and exits), whose job stop's wait
// for the runners does not see. Twenty rounds of 200 runs due at once.
// A starter is past its last statement once stop has waited for it: the
// count may take a moment to drop (as goleak retries), not a run's time.
func TestSchedulerStopLeavesNoStarter(t *testing.T) {
	base := runtime.NumGoroutine()
	for round := range 20 {
		s := newScheduler(slog.New(slog.DiscardHandler))
		const jobs = 200
		var ran atomic.Int32
		quick := runOnly(func(context.Context, Reason) { ran.Add(1) })
		due := make([]*schedJob, 0, jobs)
		for i := range jobs {
			name := fmt.Sprint("j", i)
			if err := s.add(name, "", false, quick); err != nil {
				t.Fatal(err)
			}
			due = append(due, s.jobs[name])
		}
		s.start()
		s.fire(time.Now(), due...)
		if err := s.stop(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		if got := ran.Load(); got != jobs {
			t.Fatalf("round %d: %d runs of %d", round, got, jobs)
		}
		s.starts.mu.Lock()
		unstarted := s.starts.unstarted
		s.starts.mu.Unlock()
		if unstarted != 0 {
			t.Fatalf("round %d: %d starters not yet run after stop", round, unstarted)
		}
		testwait.For(t, time.Second, "no starter left after stop", func() bool { return runtime.NumGoroutine() <= base })
	}
}

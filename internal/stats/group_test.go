package stats

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestGroupReportsManyOnOneGoroutine: 100 Reporters on one Group cost one
// goroutine at rest; each reports at its own interval, SetInterval moves
// one, and Stop of each writes its last report.
func TestGroupReportsManyOnOneGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		g := NewGroup(4)
		if err := g.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := g.Start(t.Context()); err != ErrGroupStarted {
			t.Fatalf("second Start = %v, want ErrGroupStarted", err)
		}
		sinks := make([]*fakeSink, n)
		counters := make([]*Counter, n)
		reps := make([]*Reporter, n)
		for i := range n {
			sinks[i], counters[i] = &fakeSink{}, new(Counter)
			// Jobs 0..49 report every second, 50..99 every 2 seconds.
			reps[i] = NewReporter(counters[i], sinks[i], time.Duration(1+i/50)*time.Second, quiet)
			if err := reps[i].StartIn(g); err != nil {
				t.Fatal(err)
			}
			counters[i].Add(int64(i), 0)
		}
		synctest.Wait()
		if got := statsGoroutines(); got != 1 {
			t.Fatalf("goroutines of a Group of %d reporters at rest = %d, want 1", n, got)
		}
		reps[99].SetInterval(10 * time.Second)
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		for i := range n {
			want := 2 // every second
			if i >= 50 {
				want = 1
			}
			if i == 99 {
				want = 0
			}
			if got := len(sinks[i].got()); got != want {
				t.Fatalf("reporter %d: %d reports after 2 s, want %d", i, got, want)
			}
		}
		if got := sinks[7].got()[0]; got != [2]int64{7, 0} {
			t.Fatalf("reporter 7's first report = %v, want [7 0]", got)
		}
		counters[99].Add(1, 1)
		for _, r := range reps {
			if err := r.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := sinks[99].got(); len(got) != 1 || got[0] != [2]int64{100, 1} {
			t.Fatalf("reporter 99's reports = %v, want only its last one, [100 1]", got)
		}
		g.Stop()
		g.Stop()
	})
}

// statsGoroutines counts the goroutines running a method of this package
// (Group.loop, a Reporter's write): unlike runtime.NumGoroutine, it does
// not count another test's goroutine that is still exiting.
func statsGoroutines() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "shardflow/internal/stats.(*") {
			n++
		}
	}
	return n
}

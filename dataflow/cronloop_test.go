package dataflow

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// firings records, per entry name, the fake-clock times of its fires.
type firings struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (f *firings) fn(name string) func() {
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.at[name] = append(f.at[name], time.Now())
	}
}

func (f *firings) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.at[name])
}

// newFuncCronLoop is a cronLoop whose entries are functions it calls.
func newFuncCronLoop() *cronLoop[func()] {
	return newCronLoop(func(_ time.Time, due []func()) {
		for _, f := range due {
			f()
		}
	})
}

// The loop fires each entry on its schedule, counted from start for
// entries added before it and from the add for the others; a removed entry
// never fires again; stop ends the goroutine (the bubble would not end
// otherwise). In a synctest bubble: the clock is fake.
func TestCronLoopFiresOnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &firings{at: map[string][]time.Time{}}
		c := newFuncCronLoop()
		every := func(d time.Duration) *cronSchedule { return &cronSchedule{Schedule: exactly(d)} }
		c.add(every(2*time.Second), f.fn("a"))
		removed := c.add(every(time.Second), f.fn("removed"))
		time.Sleep(10 * time.Second) // before start: nothing fires
		synctest.Wait()
		if n := f.count("a"); n != 0 {
			t.Fatalf("fired %d times before start", n)
		}
		start := time.Now()
		c.start()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		c.remove(removed)
		b := c.add(every(3*time.Second), f.fn("b"))
		time.Sleep(6*time.Second + 500*time.Millisecond)
		synctest.Wait()
		c.remove(b)
		c.remove(b) // twice: no effect
		time.Sleep(10 * time.Second)
		synctest.Wait()
		c.stop()
		c.stop()

		// a: every 2 s from start, for 18 s (1.5 + 6.5 + 10).
		if got := f.count("a"); got != 9 {
			t.Errorf("a fired %d times in 18 s every 2 s, want 9: %v", got, f.at["a"])
		}
		for i, at := range f.at["a"] {
			if want := start.Add(time.Duration(2*(i+1)) * time.Second); !at.Equal(want) {
				t.Errorf("a's fire %d at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		if got := f.count("removed"); got != 1 {
			t.Errorf("the entry removed at 1.5 s fired %d times, want 1 (at 1 s)", got)
		}
		// b: added at 1.5 s, every 3 s, removed at 8 s: fires at 4.5 and 7.5.
		if got := f.count("b"); got != 2 {
			t.Errorf("b fired %d times, want 2: %v", got, f.at["b"])
		}
	})
}

// A schedule that ends (Next is zero) leaves the heap; stop before start
// and add after stop do nothing.
func TestCronLoopEndsAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &firings{at: map[string][]time.Time{}}
		c := newFuncCronLoop()
		c.start()
		c.add(&cronSchedule{Schedule: &onceSchedule{}}, f.fn("once"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := f.count("once"); n != 1 {
			t.Errorf("a schedule with one fire time fired %d times, want 1", n)
		}
		c.stop()
		e := c.add(&cronSchedule{Schedule: exactly(time.Second)}, f.fn("late"))
		c.remove(e)
		c.start()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := f.count("late"); n != 0 {
			t.Errorf("an entry added after stop fired %d times", n)
		}

		idle := newFuncCronLoop()
		idle.stop() // never started: returns at once
	})
}

// exactly is a schedule every d from the time it is asked about
// (cron.Every rounds to whole seconds).
type exactly time.Duration

func (d exactly) Next(t time.Time) time.Time { return t.Add(time.Duration(d)) }

// onceSchedule fires one second after its first Next call, never again.
type onceSchedule struct{ used bool }

func (o *onceSchedule) Next(t time.Time) time.Time {
	if o.used {
		return time.Time{}
	}
	o.used = true
	return t.Add(time.Second)
}

// Random adds and removes keep the heap ordered and fire every live entry
// at exactly its schedule: each entry fires every k seconds from its add,
// and is checked against that. The seed is printed; SHARDFLOW_CRON_SEED
// replays it.
func TestCronLoopRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDFLOW_CRON_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (SHARDFLOW_CRON_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	synctest.Test(t, func(t *testing.T) {
		f := &firings{at: map[string][]time.Time{}}
		c := newFuncCronLoop()
		c.start()
		type live struct {
			e       *cronEntry[func()]
			name    string
			added   time.Time
			period  time.Duration
			removed time.Time
		}
		var entries []live
		var gone []live
		for step := range 400 {
			if len(entries) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(entries))
				c.remove(entries[i].e)
				entries[i].removed = time.Now()
				gone = append(gone, entries[i])
				entries = append(entries[:i], entries[i+1:]...)
			} else {
				period := time.Duration(1+rng.IntN(7)) * time.Second
				name := "e" + strconv.Itoa(step)
				entries = append(entries, live{e: c.add(&cronSchedule{Schedule: exactly(period)}, f.fn(name)), name: name, added: time.Now(), period: period})
			}
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			synctest.Wait()
		}
		end := time.Now()
		c.stop()
		check := func(l live, until time.Time) {
			at := f.at[l.name]
			want := int(until.Sub(l.added) / l.period)
			if len(at) != want {
				t.Errorf("%s (every %v from %v to %v) fired %d times, want %d", l.name, l.period, l.added, until, len(at), want)
				return
			}
			for i, a := range at {
				if w := l.added.Add(time.Duration(i+1) * l.period); !a.Equal(w) {
					t.Errorf("%s fire %d at %v, want %v", l.name, i, a, w)
				}
			}
		}
		for _, l := range entries {
			check(l, end)
		}
		for _, l := range gone {
			check(l, l.removed) // fires due at the removal came before it
		}
	})
}

// The entries due at one instant go to fire in one call, and entries on
// one shared schedule (whose next time the loop computes once per
// instant) fire as often as one on a schedule of its own. In a synctest
// bubble.
func TestCronLoopFiresDueTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			batches [][]string
		)
		c := newCronLoop(func(_ time.Time, due []string) {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, slices.Clone(due))
		})
		shared := &cronSchedule{Schedule: exactly(2 * time.Second)}
		c.add(shared, "a")
		c.add(shared, "b")
		c.add(&cronSchedule{Schedule: exactly(2 * time.Second)}, "own")
		c.start()
		time.Sleep(6500 * time.Millisecond)
		synctest.Wait()
		c.stop()
		mu.Lock()
		defer mu.Unlock()
		if len(batches) != 3 {
			t.Fatalf("fired %d times in 6.5 s (%v), want 3 calls of all three", len(batches), batches)
		}
		for _, b := range batches {
			slices.Sort(b)
			if !slices.Equal(b, []string{"a", "b", "own"}) {
				t.Fatalf("batches %v, want [a b own] each time", batches)
			}
		}
	})
}

// fire gets each entry's own fire time, one call per instant in time
// order, even when the loop reaches them late: here the first fire holds
// the loop past both entries' next times. In a synctest bubble.
func TestCronLoopFiresWithTheScheduledTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct {
			at  time.Duration
			due []string
		}
		var (
			mu    sync.Mutex
			calls []call
		)
		start := time.Now()
		hold := true
		c := newCronLoop(func(at time.Time, due []string) {
			mu.Lock()
			calls = append(calls, call{at.Sub(start), slices.Clone(due)})
			first := hold
			hold = false
			mu.Unlock()
			if first {
				time.Sleep(3500 * time.Millisecond) // a at 2 s; b due at 3 s, a at 4 s meanwhile
			}
		})
		c.add(&cronSchedule{Schedule: exactly(2 * time.Second)}, "a")
		c.add(&cronSchedule{Schedule: exactly(3 * time.Second)}, "b")
		c.start()
		time.Sleep(5600 * time.Millisecond)
		synctest.Wait()
		c.stop()
		mu.Lock()
		defer mu.Unlock()
		want := []call{{2 * time.Second, []string{"a"}}, {3 * time.Second, []string{"b"}}, {4 * time.Second, []string{"a"}}}
		if !slices.EqualFunc(calls, want, func(x, y call) bool { return x.at == y.at && slices.Equal(x.due, y.due) }) {
			t.Fatalf("calls %v, want %v (each fire with its own scheduled time)", calls, want)
		}
	})
}

// TestCronLoopNextAfterIsNext: the next fire time a run asks for
// (nextAfter), answered from the loop's last Next where it can be, is
// Next's own answer, at times before, inside and after the interval that
// memo covers, for Quartz specs, robfig descriptors and "@every" (whose
// times count from the time asked, so never from the memo).
func TestCronLoopNextAfterIsNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC) // a DST change in Europe
	for _, spec := range []string{"* * * * * ?", "0/20 * * * * ?", "0 0 2 * * ?", "CRON_TZ=Europe/Berlin 0 30 2 * * ?", "@daily", "@every 10s"} {
		parsed, err := jobconfig.ParseCron(spec)
		if err != nil {
			t.Fatal(err)
		}
		c := newCronLoop(func(time.Time, []int) {})
		s := newCronSchedule(parsed)
		for range 200 {
			at := base.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
			c.mu.Lock()
			next := s.nextLocked(at) // as the loop does at a fire
			c.mu.Unlock()
			span := next.Sub(at) + 2*time.Second
			for range 20 {
				now := at.Add(time.Duration(rng.Int64N(int64(span))) - time.Second)
				if got, want := c.nextAfter(s, now), s.Next(now); !got.Equal(want) {
					t.Fatalf("%q: memo Next(%v) = %v; nextAfter(%v) = %v, want %v", spec, at, next, now, got, want)
				}
			}
		}
	}
}

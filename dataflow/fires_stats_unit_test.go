package dataflow

import (
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// The fires measurement's accounting (TestFires, `make bench-fires`) on
// hand-made runs: which runs count for which tick, the misfires, and the
// percentiles, against figures worked out by hand.
func TestFireAccounting(t *testing.T) {
	sched, err := jobconfig.ParseCron("* * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// run: a run started at startMs (after its tick) and reaching BeforeRun
	// at beforeMs.
	run := func(server string, job int, reason Reason, startMs, beforeMs int) fireRun {
		return fireRun{server: server, job: job, reason: reason, started: at(startMs), beforeRun: at(beforeMs)}
	}
	// Window [3:00:01, 3:00:03): ticks :01 and :02; 2 jobs on 2 servers: 8
	// runs expected.
	from, to := at(1000), at(3000)
	runs := []fireRun{
		run("s1", 0, ReasonCron, 999, 1100), // tick :00: before the window
		// Tick :01: latencies 10, 20, 30 ms; s2/job 1 has none.
		run("s1", 0, ReasonCron, 1001, 1010),
		run("s1", 1, ReasonCron, 1002, 1020),
		run("s2", 0, ReasonCron, 1003, 1030),
		// Tick :02: 40, 50 and 500 ms; s1/job 1 has none.
		run("s1", 0, ReasonCron, 2001, 2040),
		run("s2", 0, ReasonCron, 2001, 2050),
		run("s2", 1, ReasonCron, 2200, 2500),
		run("s2", 1, ReasonCron, 2300, 2310), // the same server, job and tick again
		// Catch-up runs: one in the window, one after it.
		run("s1", 1, ReasonMisfire, 2100, 2400),
		run("s1", 1, ReasonMisfire, 3100, 3200),
		run("s1", 0, ReasonTrigger, 1500, 1600),
		run("s1", 0, ReasonCron, 3000, 3005), // tick :03: after the window
	}
	s := fireAccounting(runs, sched, from, to, 2, 2)
	want := fireStats{
		window: 2 * time.Second, ticks: 2, expected: 8,
		fired: 6, misfires: 1, other: 1, duplicates: 1,
		// Sorted latencies 10 20 30 40 50 500 ms: nearest rank p50 is the
		// 3rd, p99 the 6th.
		p50: 30 * time.Millisecond, p99: 500 * time.Millisecond, max: 500 * time.Millisecond,
		// Starts after their tick: 1 2 3 1 1 200 ms.
		startP99: 200 * time.Millisecond,
	}
	if s != want {
		t.Fatalf("accounting:\n got %+v\nwant %+v", s, want)
	}
	if fired, expected := s.firesPerSecond(); fired != 3 || expected != 4 {
		t.Fatalf("fires/s = %v against %v, want 3 against 4", fired, expected)
	}

	// With the fire time recorded, a run started more than a period late
	// counts for its own tick: s1/job 0's run of :01 starts at :02.2, after
	// the run of :02 (no duplicate, both ticks fired); latency from :01.
	late := []fireRun{
		{server: "s1", job: 0, reason: ReasonCron, scheduled: at(2000), started: at(2001), beforeRun: at(2010)},
		{server: "s1", job: 0, reason: ReasonCron, scheduled: at(1000), started: at(2200), beforeRun: at(2300)},
	}
	s = fireAccounting(late, sched, from, to, 1, 1)
	want = fireStats{window: 2 * time.Second, ticks: 2, expected: 2, fired: 2,
		p50: 10 * time.Millisecond, p99: 1300 * time.Millisecond, max: 1300 * time.Millisecond, startP99: 1200 * time.Millisecond}
	if s != want {
		t.Fatalf("accounting by fire time:\n got %+v\nwant %+v", s, want)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	ds := make([]time.Duration, 0, 200)
	for i := 200; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 100 * time.Millisecond}, {0.99, 198 * time.Millisecond}, {1, 200 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(1..200 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile(none) = %v, want 0", got)
	}
}

func TestPrevTick(t *testing.T) {
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		spec string
		t    time.Time
		want time.Time
	}{
		{"* * * * * ?", day.Add(1500 * time.Millisecond), day.Add(time.Second)},
		{"* * * * * ?", day.Add(2 * time.Second), day.Add(2 * time.Second)}, // on the tick itself
		{"0/10 * * * * ?", day.Add(29*time.Second + 999*time.Millisecond), day.Add(20 * time.Second)},
		{"0 0 2 * * ?", day.Add(2*time.Hour + 300*time.Millisecond), day.Add(2 * time.Hour)},
		{"0 0 2 * * ?", day.Add(time.Hour), day.Add(-22 * time.Hour)}, // yesterday's
	} {
		sched, err := jobconfig.ParseCron(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := prevTick(sched, c.t); !got.Equal(c.want) {
			t.Errorf("prevTick(%q, %v) = %v, want %v", c.spec, c.t, got, c.want)
		}
	}
}

// TestTickLines: the per-tick breakdown of TestFires groups cron runs by
// the tick they serve (a run of :01 started after :02 stays under :01),
// gives each tick's fire->start and fire->BeforeRun percentiles, and counts
// the catch-up runs started from a tick to the next.
func TestTickLines(t *testing.T) {
	sched, err := jobconfig.ParseCron("* * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	runs := []fireRun{
		{job: 0, reason: ReasonCron, scheduled: at(1000), started: at(1100), beforeRun: at(1300)},
		{job: 1, reason: ReasonCron, scheduled: at(1000), started: at(2200), beforeRun: at(2500)}, // late: still :01
		{job: 0, reason: ReasonCron, scheduled: at(2000), started: at(2010), beforeRun: at(2020)},
		{job: 1, reason: ReasonMisfire, started: at(2600), beforeRun: at(2700)},
	}
	got := tickLines(runs, sched)
	want := []string{
		"tick 03:00:01.000 runs=2 fire->start p50=0.100s p99=1.200s max=1.200s fire->BeforeRun p50=0.300s p99=1.500s max=1.500s misfires-started-before-next=0",
		"tick 03:00:02.000 runs=1 fire->start p50=0.010s p99=0.010s max=0.010s fire->BeforeRun p50=0.020s p99=0.020s max=0.020s misfires-started-before-next=1",
	}
	if len(got) != len(want) {
		t.Fatalf("tickLines: %d lines, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

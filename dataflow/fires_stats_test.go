package dataflow

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
)

// fireRun is one run of the fires measurement (TestFires), as a worker
// process's listener recorded it.
type fireRun struct {
	server    string
	job       int
	reason    Reason
	scheduled time.Time // RunInfo.ScheduledFire: the tick (zero: not recorded)
	started   time.Time // RunInfo.Started: before the run's Begin
	beforeRun time.Time // when BeforeRun was called: after the Begin
}

// fireStats is what TestFires prints for one window of cron ticks.
type fireStats struct {
	window   time.Duration // to - from
	ticks    int           // the schedule's times in [from, to)
	expected int           // jobs x servers x ticks
	// fired counts the cron runs of the window's ticks that reached
	// BeforeRun: each server runs each job once per tick.
	fired int
	// misfires counts the catch-up runs (ReasonMisfire) that started in
	// the window: a fire that found the job's previous run still going.
	misfires int
	// other counts runs for other reasons (trigger, failover) started in
	// the window: none are expected.
	other int
	// duplicates counts cron runs of a (server, job, tick) already
	// counted: the scheduler fires a tick once, so anything but 0 is a bug.
	duplicates int
	// Over the fired runs, from the tick (the scheduled fire time) to
	// BeforeRun: the scheduler's delay plus the run's Begin.
	p50, p99, max time.Duration
	// startP99 is the p99 of the tick to RunInfo.Started alone (the
	// scheduler's share, before Begin).
	startP99 time.Duration
}

// firesPerSecond returns the fired and the expected runs per second.
func (s fireStats) firesPerSecond() (fired, expected float64) {
	secs := s.window.Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(s.fired) / secs, float64(s.expected) / secs
}

func (s fireStats) String() string {
	fired, expected := s.firesPerSecond()
	pct := 0.0
	if s.expected > 0 {
		pct = 100 * float64(s.fired) / float64(s.expected)
	}
	return fmt.Sprintf("window=%.0fs ticks=%d expected=%d (%.1f/s) fired=%d (%.1f/s, %.2f%%) misfires=%d other=%d duplicates=%d fire->BeforeRun p50=%.3fs p99=%.3fs max=%.3fs (fire->start p99=%.3fs)",
		s.window.Seconds(), s.ticks, s.expected, expected, s.fired, fired, pct, s.misfires, s.other, s.duplicates,
		s.p50.Seconds(), s.p99.Seconds(), s.max.Seconds(), s.startP99.Seconds())
}

// fireAccounting counts runs against the ticks of sched in [from, to) for
// jobs jobs on servers servers. A cron run's tick is the fire time it
// serves (RunInfo.ScheduledFire). A worker built before that field records
// none: its run's tick is then the latest schedule time at or before its
// start (prevTick), which counts a run started more than a period late
// under a later tick (and, when that tick's own run comes too, as a
// duplicate).
func fireAccounting(runs []fireRun, sched cron.Schedule, from, to time.Time, jobs, servers int) fireStats {
	s := fireStats{window: to.Sub(from)}
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = sched.Next(t) {
		s.ticks++
	}
	s.expected = jobs * servers * s.ticks
	type key struct {
		server string
		job    int
		tick   int64
	}
	seen := map[key]bool{}
	var lat, startLat []time.Duration
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, r := range runs {
		switch r.reason {
		case ReasonCron:
			tick := r.scheduled
			if tick.IsZero() {
				tick = prevTick(sched, r.started)
			}
			if tick.IsZero() || !in(tick) {
				continue
			}
			k := key{r.server, r.job, tick.UnixNano()}
			if seen[k] {
				s.duplicates++
				continue
			}
			seen[k] = true
			s.fired++
			lat = append(lat, r.beforeRun.Sub(tick))
			startLat = append(startLat, r.started.Sub(tick))
		case ReasonMisfire:
			if in(r.started) {
				s.misfires++
			}
		default:
			if in(r.started) {
				s.other++
			}
		}
	}
	s.p50, s.p99, s.max = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 1)
	s.startP99 = percentile(startLat, 0.99)
	return s
}

// percentile returns the nearest-rank p-quantile of ds (0 for none): the
// smallest value with at least p of ds at or below it. It sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := max(int(math.Ceil(p*float64(len(ds))))-1, 0)
	return ds[min(i, len(ds)-1)]
}

// prevTick returns the latest time of sched at or before t (zero if none
// within a year). robfig/cron has no previous-time function: it looks back
// from t over doubling spans until Next finds a time in (t-span, t], then
// walks forward to the last one.
func prevTick(sched cron.Schedule, t time.Time) time.Time {
	for span := time.Second; span <= 366*24*time.Hour; span *= 2 {
		x := sched.Next(t.Add(-span))
		if x.IsZero() {
			return time.Time{}
		}
		if x.After(t) {
			continue
		}
		for {
			n := sched.Next(x)
			if n.IsZero() || n.After(t) {
				return x
			}
			x = n
		}
	}
	return time.Time{}
}

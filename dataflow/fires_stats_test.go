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

// tickLines breaks runs down by the tick a cron run serves, over every
// tick the runs have (those before and after the window too: the first
// ticks after the start are where a tail may come from), one line each:
// the cron runs of the tick, fire->start and fire->BeforeRun p50/p99/max,
// and the catch-up runs (ReasonMisfire) started from that tick to the
// next. A p99 is a mixture of ticks; these lines say which tick, and
// whether the delay was the scheduler's (before start) or the Begin's.
func tickLines(runs []fireRun, sched cron.Schedule) []string {
	type agg struct{ lat, start []time.Duration }
	by := map[int64]*agg{}
	var misfireStarts []time.Time
	for _, r := range runs {
		switch {
		case r.reason == ReasonCron && !r.scheduled.IsZero():
			a := by[r.scheduled.UnixNano()]
			if a == nil {
				a = &agg{}
				by[r.scheduled.UnixNano()] = a
			}
			a.lat = append(a.lat, r.beforeRun.Sub(r.scheduled))
			a.start = append(a.start, r.started.Sub(r.scheduled))
		case r.reason == ReasonMisfire:
			misfireStarts = append(misfireStarts, r.started)
		}
	}
	ticks := make([]int64, 0, len(by))
	for k := range by {
		ticks = append(ticks, k)
	}
	slices.Sort(ticks)
	out := make([]string, 0, len(ticks))
	for _, k := range ticks {
		a, tick := by[k], time.Unix(0, k).UTC()
		next := sched.Next(tick)
		misfires := 0
		for _, m := range misfireStarts {
			if !m.Before(tick) && m.Before(next) {
				misfires++
			}
		}
		n := len(a.lat)
		out = append(out, fmt.Sprintf("tick %s runs=%d fire->start p50=%.3fs p99=%.3fs max=%.3fs fire->BeforeRun p50=%.3fs p99=%.3fs max=%.3fs misfires-started-before-next=%d",
			tick.Format("15:04:05.000"), n,
			percentile(a.start, 0.5).Seconds(), percentile(a.start, 0.99).Seconds(), percentile(a.start, 1).Seconds(),
			percentile(a.lat, 0.5).Seconds(), percentile(a.lat, 0.99).Seconds(), percentile(a.lat, 1).Seconds(), misfires))
	}
	return out
}

package dataflow

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
)

// fireTickCases are BenchmarkFireTick's sizes (jobs due at one instant)
// and crons: a period the machine's 2 cores finish each tick's runs in;
// each size runs monitored (the default) and unmonitored
// (monitorExecution=false: a steady-state run sends nothing to the store).
var fireTickCases = []struct {
	jobs      int
	spec      string
	period    time.Duration
	unmonitor bool
}{
	{1000, "* * * * * ?", time.Second, false},
	{1000, "* * * * * ?", time.Second, true},
	{10000, "0/20 * * * * ?", 20 * time.Second, false},
	{10000, "0/20 * * * * ?", 20 * time.Second, true},
}

// fireTickListener records, per run, its start (RunInfo.Started), its
// BeforeRun with the process's CPU time then, and when AfterRun came.
type fireTickListener struct {
	mu   *sync.Mutex
	runs *[]fireRun
	cpu  *[]time.Duration // processCPU at each of runs' BeforeRun
	ends *[]fireRun       // started: the run's; beforeRun: its AfterRun
	cron *atomic.Int64    // cron runs so far
	job  int
}

func (l fireTickListener) BeforeRun(_ context.Context, info RunInfo) {
	now, cpu := time.Now(), processCPU()
	l.mu.Lock()
	*l.runs = append(*l.runs, fireRun{job: l.job, reason: info.Reason, scheduled: info.ScheduledFire, started: info.Started, beforeRun: now})
	*l.cpu = append(*l.cpu, cpu)
	l.mu.Unlock()
	if info.Reason == ReasonCron {
		l.cron.Add(1)
	}
}

func (l fireTickListener) AfterRun(_ context.Context, info RunInfo, _ RunResult) {
	now := time.Now()
	l.mu.Lock()
	*l.ends = append(*l.ends, fireRun{job: l.job, reason: info.Reason, scheduled: info.ScheduledFire, started: info.Started, beforeRun: now})
	l.mu.Unlock()
}

// BenchmarkFireTick is the fire path at scale on one Node over memstore
// (no network: the coordination is in-process CPU): N no-op jobs on one
// cron (1,000 every second, 10,000 every 20 s: make bench-fires' two
// cases); each iteration is one tick. It reports, over the iterations'
// cron runs, from the tick to the run's start (RunInfo.Started, before its
// Begin) and to BeforeRun (p50/p99/max, ms), and the CPU and allocations
// per run (the whole run: the fire, Begin, the no-op pipeline, Complete).
// Two figures a loaded machine does not stretch: the process's CPU time
// from the tick to BeforeRun (p99, ms: the work done ahead of the run's
// Begin), and the share of a tick's runs that had ended before its last
// run began. A tick's runs that do not start within the tick count as not fired
// (fired-%). Real time, not synctest: the delay is the measure, and a
// loaded machine stretches it. The monitored cases are named jobs=N, the
// unmonitored ones (monitorExecution=false) jobs=N,unmonitored; 1,000 jobs
// both ways:
//
//	go test -run '^$' -bench 'BenchmarkFireTick/jobs=1000($|,)' -benchmem -benchtime 5x ./dataflow
func BenchmarkFireTick(b *testing.B) {
	for _, c := range fireTickCases {
		name := fmt.Sprintf("jobs=%d", c.jobs)
		if c.unmonitor {
			name += ",unmonitored"
		}
		b.Run(name, func(b *testing.B) { benchFireTick(b, c.jobs, c.spec, c.period, c.unmonitor) })
	}
}

func benchFireTick(b *testing.B, n int, spec string, period time.Duration, unmonitor bool) {
	sched, err := jobconfig.ParseCron(spec)
	if err != nil {
		b.Fatal(err)
	}
	srv := memstore.NewServer()
	st := srv.Connect()
	defer func() { _ = st.Close() }()
	node, err := NewNode(NodeConfig{Store: st, Namespace: "fireticks", ServerID: "s1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu   sync.Mutex
		runs = make([]fireRun, 0, n*(b.N+3))
		cpus = make([]time.Duration, 0, n*(b.N+3))
		ends = make([]fireRun, 0, n*(b.N+3))
		cron atomic.Int64
	)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				cfg := JobConfig{JobName: fmt.Sprintf("f%05d", i), Cron: spec, ShardingTotalCount: 1, DisableMonitorExecution: unmonitor}
				if err := AddJob[int](ctx, node, cfg, idleJob{}, WithListeners(fireTickListener{mu: &mu, runs: &runs, cpu: &cpus, ends: &ends, cron: &cron, job: i})); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	if err := node.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := node.Stop(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	// Warm-up: one whole tick's runs.
	for cron.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	// The window: the next b.N ticks after the warm-up's runs.
	from := sched.Next(time.Now())
	to := from.Add(time.Duration(b.N) * period)
	mu.Lock()
	first := len(runs)
	mu.Unlock()
	// The process's CPU time at each tick, read just before it (the
	// process is idle then): a run's CPU from its tick to its BeforeRun
	// is the process's work ahead of it, which a loaded machine does not
	// stretch as it stretches the wall time.
	tickCPU := map[time.Time]time.Duration{}
	var ticks sync.WaitGroup
	ticks.Go(func() {
		for t := from; t.Before(to); t = t.Add(period) {
			time.Sleep(time.Until(t.Add(-20 * time.Millisecond)))
			c := processCPU()
			mu.Lock()
			tickCPU[t] = c
			mu.Unlock()
		}
	})
	time.Sleep(time.Until(from))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	stopProfile := windowProfile(b)
	b.ResetTimer()
	// Wait for the window's runs: until every tick's, or 10 s after it.
	deadline := to.Add(10 * time.Second)
	for time.Now().Before(to) || cron.Load() < int64(n*(b.N+1)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	stopProfile()
	ticks.Wait()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	mu.Lock()
	window := append([]fireRun(nil), runs[first:]...)
	// Per tick: its last BeforeRun, and the CPU to each of its BeforeRuns.
	lastBegin := map[time.Time]time.Time{}
	var beginCPU []time.Duration
	for i, r := range runs[first:] {
		if t := prevTick(sched, r.started); r.reason == ReasonCron && !t.Before(from) && t.Before(to) {
			if r.beforeRun.After(lastBegin[t]) {
				lastBegin[t] = r.beforeRun
			}
			beginCPU = append(beginCPU, cpus[first+i]-tickCPU[t])
		}
	}
	// The runs of a tick that ended before its last run had begun.
	var endedEarly, ticked int
	for _, e := range ends {
		if t := prevTick(sched, e.started); e.reason == ReasonCron && !t.Before(from) && t.Before(to) {
			ticked++
			if e.beforeRun.Before(lastBegin[t]) {
				endedEarly++
			}
		}
	}
	mu.Unlock()
	s := fireAccounting(window, sched, from, to, n, 1)
	var startLat []time.Duration
	for _, r := range window {
		if r.reason == ReasonCron {
			if t := prevTick(sched, r.started); !t.Before(from) && t.Before(to) {
				startLat = append(startLat, r.started.Sub(t))
			}
		}
	}
	all := max(len(window), 1)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(startLat, 0.5)), "start-p50-ms")
	b.ReportMetric(ms(s.startP99), "start-p99-ms")
	b.ReportMetric(ms(percentile(startLat, 1)), "start-max-ms")
	b.ReportMetric(ms(s.p99), "beforerun-p99-ms")
	b.ReportMetric(ms(percentile(beginCPU, 0.99)), "beforerun-p99-cpu-ms")
	b.ReportMetric(100*float64(endedEarly)/float64(max(ticked, 1)), "ended-before-last-begin-%")
	b.ReportMetric(100*float64(s.fired)/float64(max(s.expected, 1)), "fired-%")
	b.ReportMetric(float64(s.misfires), "misfires")
	b.ReportMetric(float64(cpu.Microseconds())/float64(all), "cpu-µs/run")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(all), "allocs/run")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(all), "B/run")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSchedulerFireTick is the scheduler's own delay, with no
// coordination: N jobs on one cron firing every second, whose runs note
// their start and then block a millisecond (a Begin waiting for its
// store). Each iteration is one tick. It reports, over the iterations'
// runs, from the tick to the run's start (p50/p99/max, ms), and the CPU
// and allocations per fire.
//
//	go test -run '^$' -bench BenchmarkSchedulerFireTick -benchtime 5x ./dataflow
func BenchmarkSchedulerFireTick(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) { benchSchedulerFireTick(b, n) })
	}
}

func benchSchedulerFireTick(b *testing.B, n int) {
	const spec = "* * * * * ?"
	sched, err := jobconfig.ParseCron(spec)
	if err != nil {
		b.Fatal(err)
	}
	s := newScheduler(slog.New(slog.DiscardHandler))
	// Each run's start goes to its own slot: no lock among the runs.
	started := make([]time.Time, n*(b.N+3))
	var next atomic.Int64
	run := runOnly(func(context.Context, Reason) {
		if i := next.Add(1) - 1; int(i) < len(started) {
			started[i] = time.Now()
		}
		time.Sleep(time.Millisecond)
	})
	for i := range n {
		if err := s.add(fmt.Sprintf("f%05d", i), spec, true, run); err != nil {
			b.Fatal(err)
		}
	}
	count := func() int { return min(int(next.Load()), len(started)) }
	s.start()
	defer func() {
		if err := s.stop(context.Background(), false); err != nil {
			b.Error(err)
		}
	}()
	for count() < n { // warm-up: one tick
		time.Sleep(10 * time.Millisecond)
	}
	from := sched.Next(time.Now())
	to := from.Add(time.Duration(b.N) * time.Second)
	time.Sleep(time.Until(from) - 100*time.Millisecond)
	first := count()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	b.ResetTimer()
	deadline := to.Add(5 * time.Second)
	for time.Now().Before(to) || count() < first+n*b.N && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	var lag []time.Duration
	for _, t := range started[first:count()] {
		if tick := prevTick(sched, t); !tick.Before(from) && tick.Before(to) {
			lag = append(lag, t.Sub(tick))
		}
	}
	fires := max(len(lag), 1)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(lag, 0.5)), "start-p50-ms")
	b.ReportMetric(ms(percentile(lag, 0.99)), "start-p99-ms")
	b.ReportMetric(ms(percentile(lag, 1)), "start-max-ms")
	b.ReportMetric(100*float64(len(lag))/float64(n*b.N), "fired-%")
	b.ReportMetric(float64(cpu.Microseconds())/float64(fires), "cpu-µs/fire")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(fires), "allocs/fire")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(fires), "B/fire")
	b.ReportMetric(0, "ns/op")
}

// windowProfile starts a CPU profile of the measured window alone (not the
// jobs' adding and joining, nor the warm-up tick, which -cpuprofile
// includes) when SHARDFLOW_FIRETICK_CPUPROFILE names a file; the returned
// func stops it.
func windowProfile(b *testing.B) (stop func()) {
	path := os.Getenv("SHARDFLOW_FIRETICK_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// nopListener is a JobListener that does nothing: BenchmarkRunOnce's runs
// call one, as BenchmarkFireTick's do.
type nopListener struct{}

func (nopListener) BeforeRun(context.Context, RunInfo)           {}
func (nopListener) AfterRun(context.Context, RunInfo, RunResult) {}

// BenchmarkRunOnce is one cron run's own cost, run after run on one
// goroutine (no scheduler, no other run beside it): one no-op job of one
// item on one Node over memstore, monitored and unmonitored
// (monitorExecution=false: 0 store requests per run once its plan is
// written). ns/op and allocs/op are BenchmarkFireTick's cpu-µs/run and
// allocs/run without the fire and the contention of 1,000 runs at once;
// being sequential and short, it is the figure to compare old and new code
// with on a loaded machine.
//
//	go test -run '^$' -bench BenchmarkRunOnce -benchmem ./dataflow
func BenchmarkRunOnce(b *testing.B) {
	for _, unmonitor := range []bool{false, true} {
		name := "monitored"
		if unmonitor {
			name = "unmonitored"
		}
		b.Run(name, func(b *testing.B) {
			srv := memstore.NewServer()
			st := srv.Connect()
			defer func() { _ = st.Close() }()
			node, err := NewNode(NodeConfig{Store: st, Namespace: "runonce", ServerID: "s1", Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// A daily cron: the scheduler does not fire during the loop.
			cfg := JobConfig{JobName: "r", Cron: "0 0 0 * * ?", ShardingTotalCount: 1, DisableMonitorExecution: unmonitor}
			if err := AddJob[int](ctx, node, cfg, idleJob{}, WithListeners(nopListener{})); err != nil {
				b.Fatal(err)
			}
			if err := node.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := node.Stop(context.Background()); err != nil {
					b.Error(err)
				}
			}()
			node.mu.Lock()
			h := node.jobs["r"]
			node.mu.Unlock()
			// Warm-up: the first runs write the plan (and reshard).
			for range 3 {
				node.runOnce(ctx, h, ReasonCron, false, time.Now())
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			for range b.N {
				node.runOnce(ctx, h, ReasonCron, false, time.Now())
			}
			b.StopTimer()
			// The process's CPU per run, every goroutine's (the store's and
			// the group committer's too), which wall time on a loaded machine
			// is not.
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

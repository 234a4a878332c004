//go:build unix

package dataflow

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/integration"
)

// TestFires is the measurement behind `make bench-fires`: how many jobs
// sharing one cron a few servers fire on time. SHARDFLOW_FIRES_SERVERS
// worker processes (internal/fireworker, default 3), each a Node on its own
// session of one real ZooKeeper, host SHARDFLOW_FIRES_JOBS no-op jobs (each
// with one item per server) on the cron SHARDFLOW_FIRES_CRON (default every
// second). The workers join their jobs before their Nodes start
// (fireworker --hold), so no job fires while the others are being added;
// once every worker has added its jobs (readyBound), the test starts them
// all (SIGUSR1), waits SHARDFLOW_FIRES_WARMUP (default 5 s; the last
// joins' resharding settles), then
// counts the runs of the cron ticks in the next SHARDFLOW_FIRES_SECONDS
// (default 30), waiting SHARDFLOW_FIRES_GRACE (default 5 s) after the last
// tick for late runs, and logs one FIRES line (fireAccounting): fires/s
// achieved against expected, misfires, and p50/p99/max from a fire's
// scheduled time to BeforeRun, with the load average before and after.
// SHARDFLOW_FIRES_ZK_HEAP (default 1g) is the ZooKeeper's heap;
// SHARDFLOW_FIRES_STORE=pg runs the workers on a Postgres container
// (coord/pgstore) instead. SHARDFLOW_FIRES_COMPARE=1 measures twice in
// one run, side by side: first with every Multi a request of its own
// (fireworker --group-commit=false: zkstore.Config.NoGroupCommit), then
// with group commit (the default); each FIRES line names its variant.
// SHARDFLOW_FIRES_VARIANTS="flags;flags" measures each fireworker flag set
// too, before the default (e.g. "--gc-ops=64 --gc-inflight=4").
// SHARDFLOW_FIRES_BASELINE=rev measures the fireworker built at git
// revision rev first (integration.BuildBinaryAt), the old binary beside
// the new, with the flags in SHARDFLOW_FIRES_BASELINE_FLAGS (e.g.
// "--monitor-execution=false", to set it beside that variant). SHARDFLOW_FIRES_PROFILE=dir has each worker write a CPU profile
// there (not the baseline's, when it predates --cpuprofile);
// SHARDFLOW_FIRES_KEEP=dir copies the workers' runs files there. A FIRES
// "tick" line per tick the runs serve (tickLines) says which ticks a
// tail comes from and whether before a run's start or in its Begin.
// Each worker's "stopped" line gives the store requests of its running
// phase: reads, multis (and their ops), and the combined multis sent for
// them on ZooKeeper (batches). It asserts
// outcomes only: every worker stops cleanly, no tick runs twice. Skipped
// unless SHARDFLOW_FIRES_JOBS is set.
func TestFires(t *testing.T) {
	jobs := envInt(t, "SHARDFLOW_FIRES_JOBS", 0)
	if jobs <= 0 {
		t.Skip("set SHARDFLOW_FIRES_JOBS (make bench-fires) to run the fires measurement")
	}
	servers := envInt(t, "SHARDFLOW_FIRES_SERVERS", 3)
	seconds := envInt(t, "SHARDFLOW_FIRES_SECONDS", 30)
	warmup := time.Duration(envInt(t, "SHARDFLOW_FIRES_WARMUP", 5)) * time.Second
	grace := time.Duration(envInt(t, "SHARDFLOW_FIRES_GRACE", 5)) * time.Second
	spec := cmp.Or(os.Getenv("SHARDFLOW_FIRES_CRON"), "* * * * * ?")
	heap := cmp.Or(os.Getenv("SHARDFLOW_FIRES_ZK_HEAP"), "1g")
	storeKind := cmp.Or(os.Getenv("SHARDFLOW_FIRES_STORE"), "zk")
	if storeKind != "zk" && storeKind != "pg" {
		t.Fatalf("SHARDFLOW_FIRES_STORE=%q: use zk (ZooKeeper) or pg (Postgres)", storeKind)
	}
	if servers <= 0 || seconds <= 0 {
		t.Fatalf("SHARDFLOW_FIRES_SERVERS=%d, SHARDFLOW_FIRES_SECONDS=%d: both must be > 0", servers, seconds)
	}
	sched, err := jobconfig.ParseCron(spec)
	if err != nil {
		t.Fatalf("SHARDFLOW_FIRES_CRON=%q: %v", spec, err)
	}
	logf := func(format string, args ...any) {
		t.Logf("FIRES store=%s jobs=%d servers=%d cron=%q "+format, append([]any{storeKind, jobs, servers, spec}, args...)...)
	}

	storeArgs, where := fireStore(t, storeKind, heap)
	type variant struct {
		name, bin string
		flags     []string // the worker's flags beside the store's
	}
	bin := integration.BuildBinary(t, "./internal/fireworker")
	var variants []variant
	if rev := os.Getenv("SHARDFLOW_FIRES_BASELINE"); rev != "" {
		// The old binary first, side by side in one run.
		old, commit := integration.BuildBinaryAt(t, rev, "./dataflow/internal/fireworker")
		flags := strings.Fields(os.Getenv("SHARDFLOW_FIRES_BASELINE_FLAGS"))
		variants = append(variants, variant{strings.Join(append([]string{"baseline@" + commit}, flags...), " "), old, flags})
	}
	if os.Getenv("SHARDFLOW_FIRES_COMPARE") == "1" {
		variants = append(variants, variant{"--group-commit=false", bin, []string{"--group-commit=false"}})
	}
	// SHARDFLOW_FIRES_VARIANTS: more fireworker flag sets, ';' between
	// sets, ' ' between a set's flags (the group committer's tuning).
	for v := range strings.SplitSeq(os.Getenv("SHARDFLOW_FIRES_VARIANTS"), ";") {
		if v = strings.TrimSpace(v); v != "" {
			variants = append(variants, variant{v, bin, strings.Fields(v)})
		}
	}
	variants = append(variants, variant{"group-commit", bin, nil})
	for _, v := range variants {
		args := append(slices.Clone(storeArgs), v.flags...)
		vlogf := func(format string, a ...any) { logf("variant=%q "+format, append([]any{v.name}, a...)...) }
		// A baseline may predate --cpuprofile and --hold: each is
		// given when the binary has it, so that old and new are measured
		// alike (a baseline's profile is not written: it would have the
		// new one's name).
		current := !strings.HasPrefix(v.name, "baseline")
		hold := current || hasFlag(t, v.bin, "hold")
		// A worker with --reqlog prints "warm" too: the window then
		// starts after every job's first fire (a baseline without it
		// starts WARMUP after ready; its tick lines show its first fire).
		warm := current || hasFlag(t, v.bin, "reqlog")
		measureFires(t, v.bin, args, where, vlogf, current, hold, warm, sched, jobs, servers, seconds, warmup, grace, spec)
	}
}

// hasFlag reports whether the program bin lists the flag name in its
// usage (-h).
func hasFlag(t *testing.T, bin, name string) bool {
	t.Helper()
	out, _ := exec.Command(bin, "-h").CombinedOutput() // usage: exit status 0 or 2
	return strings.Contains(string(out), "\n  -"+name+"\n") || strings.Contains(string(out), "\n  -"+name+" ")
}

// measureFires is one measurement of TestFires: the workers started on
// the store of args, the window, the stop and the FIRES line.
func measureFires(t *testing.T, bin string, storeArgs []string, where string, logf func(string, ...any), profile, hold, warm bool,
	sched cron.Schedule, jobs, servers, seconds int, warmup, grace time.Duration, spec string) {
	dir := t.TempDir()
	ns := fmt.Sprintf("fires%d", time.Now().UnixNano())
	loadStart := loadAverage()
	logf("%s; load average at the start %s", where, loadStart)

	procs := make([]*integration.Process, servers)
	outs := make([]string, servers)
	start := time.Now()
	for i := range procs {
		id := fmt.Sprintf("s%d", i+1)
		outs[i] = filepath.Join(dir, id+".runs")
		args := append(slices.Clone(storeArgs),
			"--namespace", ns, "--server-id", id,
			"--jobs", strconv.Itoa(jobs), "--total", strconv.Itoa(servers), "--cron", spec, "--out", outs[i])
		if hold {
			args = append(args, "--hold")
		}
		if pd := os.Getenv("SHARDFLOW_FIRES_PROFILE"); pd != "" && profile {
			args = append(args, "--cpuprofile", filepath.Join(pd, fmt.Sprintf("%s-%s.pprof", ns, id)))
		}
		if keep := os.Getenv("SHARDFLOW_FIRES_KEEP"); keep != "" && warm {
			// KEEP names a directory to fill: it need not exist yet.
			if err := os.MkdirAll(keep, 0o755); err != nil {
				t.Fatalf("SHARDFLOW_FIRES_KEEP: %v", err)
			}
			args = append(args, "--reqlog", filepath.Join(keep, fmt.Sprintf("%s-%s.reqs", ns, id)))
		}
		procs[i] = integration.StartProcess(t, bin, args, nil)
	}
	bound := readyBound(jobs, servers)
	if hold {
		// Every worker joins its jobs before any of them fires: a job
		// firing from its join on loads the store while the other jobs
		// are still being added (10,000 jobs were not added in 40
		// minutes so).
		if !awaitLines(t, procs, "added", start, bound, logf) {
			return
		}
		logf("all %d workers added their jobs after %.1f s; starting them", servers, time.Since(start).Seconds())
		for i, p := range procs {
			if err := syscall.Kill(p.Pid(), syscall.SIGUSR1); err != nil {
				t.Fatalf("worker s%d: start it: %v", i+1, err)
			}
		}
	}
	if !awaitLines(t, procs, "ready", start, bound, logf) {
		return
	}
	logf("all %d workers ready after %.1f s", servers, time.Since(start).Seconds())
	if warm {
		// The first fire after the start is every job's first Begin (its
		// plan written, the leader's sharding), 30,000 of them at once
		// with 10,000 jobs: not the steady state the window measures.
		// The tick lines show it beside the window's ticks.
		ready := time.Now()
		if !awaitLines(t, procs, "warm", ready, readyBound(jobs, servers), logf) {
			return
		}
		logf("all %d workers warm (every job's first cron run at BeforeRun) %.1f s after ready", servers, time.Since(ready).Seconds())
	} else if settle := envInt(t, "SHARDFLOW_FIRES_SETTLE", 0); settle > 0 {
		// A baseline that prints no "warm": SETTLE seconds stand for it.
		logf("settling %d s (SHARDFLOW_FIRES_SETTLE) for a worker that prints no warm line", settle)
		time.Sleep(time.Duration(settle) * time.Second) // a measurement's wait, not a synchronisation
	}

	// The window: whole ticks, from the first after the warm-up, for
	// the given seconds.
	from := sched.Next(time.Now().Add(warmup).Add(-time.Nanosecond))
	to := sched.Next(from.Add(time.Duration(seconds)*time.Second - time.Nanosecond))
	if from.IsZero() || to.IsZero() {
		t.Fatalf("SHARDFLOW_FIRES_CRON=%q has no two ticks ahead", spec)
	}
	logf("window %s .. %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly))
	time.Sleep(time.Until(to.Add(grace))) // a measurement's window, not a wait for a state

	stopWorkers(t, procs)
	loadEnd := loadAverage()
	var runs []fireRun
	for i, p := range procs {
		// Its outcome, its error on exit and the first errors of its runs
		// (the worker logs 5 at most), in FIRES lines: make bench-fires
		// shows those alone.
		for _, l := range p.Lines() {
			if strings.HasPrefix(l, "stopped") || strings.HasPrefix(l, "error") || strings.Contains(l, "run error") {
				logf("worker s%d %s", i+1, l)
			}
		}
		if _, err := os.Stat(outs[i]); err != nil {
			t.Errorf("worker s%d wrote no runs (%v): its runs are left out of the count", i+1, err)
			continue
		}
		runs = append(runs, readFireRuns(t, fmt.Sprintf("s%d", i+1), outs[i])...)
	}
	for _, l := range tickLines(runs, sched) {
		logf("%s", l)
	}
	if keep := os.Getenv("SHARDFLOW_FIRES_KEEP"); keep != "" {
		// The workers' runs files, for a closer look than the FIRES lines.
		for i := range procs {
			b, err := os.ReadFile(outs[i])
			if err == nil {
				err = os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-s%d.runs", ns, i+1)), b, 0o644)
			}
			if err != nil {
				t.Errorf("SHARDFLOW_FIRES_KEEP: %v", err)
			}
		}
	}
	s := fireAccounting(runs, sched, from, to, jobs, servers)
	logf("%s; load average at the start %s, at the end %s", s, loadStart, loadEnd)
	if s.duplicates != 0 {
		t.Errorf("%d cron runs ran a (server, job, tick) a second time", s.duplicates)
	}
}

// readyBound bounds the wait for the workers' "added" and "ready" lines:
// a join costs each server about 100 requests of a shared ZooKeeper when
// three join every job at once (10,000 jobs in 148 s at load 24), so the
// bound grows with the joins, 10 ms each beside 5 minutes (10,000 jobs on
// 3 servers: 10 minutes).
func readyBound(jobs, servers int) time.Duration {
	return 5*time.Minute + time.Duration(jobs*servers)*10*time.Millisecond
}

// awaitLines waits, until bound after start, for every worker's line
// starting with what (or error) and logs it. A worker not there in time is
// a result, not a failure (an old binary that cannot add 10,000 jobs in
// time, beside the new one): it logs that, kills the workers (they are
// not measured) and returns false.
func awaitLines(t *testing.T, procs []*integration.Process, what string, start time.Time, bound time.Duration, logf func(string, ...any)) bool {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(bound))
	defer cancel()
	for i, p := range procs {
		line, err := p.WaitForLine(ctx, regexp.MustCompile(`^(`+what+`|error)`))
		if ctx.Err() != nil {
			logf("not measured: worker s%d had not printed %q %.0f s after the start (readyBound); load average %s", i+1, what, bound.Seconds(), loadAverage())
			for _, p := range procs {
				_ = p.Kill()
			}
			return false
		}
		if err != nil {
			t.Fatalf("worker s%d: %v", i+1, err)
		}
		if strings.HasPrefix(line, "error") {
			t.Fatalf("worker s%d: %s", i+1, line)
		}
		logf("worker s%d %s", i+1, line)
	}
	return true
}

// stopWorkers stops the workers gracefully, at most 2 minutes each, side by
// side.
func stopWorkers(t *testing.T, procs []*integration.Process) {
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := p.Stop(ctx); err != nil {
				t.Errorf("worker s%d: %v", i+1, err)
			}
		})
	}
	wg.Wait()
}

// fireStore starts the coordination store's server, one of the
// measurement's own, and returns the workers' flags for it and where it is.
func fireStore(t *testing.T, kind, heap string) (args []string, where string) {
	if kind == "pg" {
		// A database of its own on a server of its own (fsync off, the
		// harness's), reached through the published port.
		dsn := integration.StartPostgres(t).NewDatabase(t)
		return []string{"--store", "pg", "--pg", dsn}, "Postgres container"
	}
	// A server with a heap for 10,000 jobs' tree (the shared test server's
	// 256 MB is not), reached at the container's address, not through
	// Docker's port proxy (docs/benchmarks.md, bench-jobs).
	zk := integration.StartZooKeeper(t, integration.WithServerEnv("JVMFLAGS",
		"-Xmx"+heap+" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"))
	addrs, err := zk.DirectServers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--store", "zk", "--zk", strings.Join(addrs, ",")}, fmt.Sprintf("ZooKeeper at %v", addrs)
}

// readFireRuns parses a fireworker's output file.
func readFireRuns(t *testing.T, server, path string) []fireRun {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("worker %s's runs: %v", server, err)
	}
	defer f.Close()
	var runs []fireRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// job reason started beforeRun [scheduled]: a BASELINE worker
		// built before RunInfo.ScheduledFire writes no fire time.
		var job, reason int
		var started, before, scheduled int64
		n, err := fmt.Sscan(sc.Text(), &job, &reason, &started, &before, &scheduled)
		if n < 4 || err != nil && n != 4 {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		r := fireRun{server: server, job: job, reason: Reason(reason), started: time.Unix(0, started), beforeRun: time.Unix(0, before)}
		if scheduled != 0 {
			r.scheduled = time.Unix(0, scheduled)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// envInt reads a positive integer variable, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

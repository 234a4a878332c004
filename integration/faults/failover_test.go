package faults

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// failoverHang is the liveness bound of the failover tests: a killed
// server's running items must run again on a live server within it, or the
// test fails. It is deliberately generous (three session timeouts plus 5 s):
// it catches a hang, not a slow machine. How fast failover is, is measured
// (the FAILOVER line) and reported in docs/benchmarks.md, never asserted.
const failoverHang = 3*sessionTimeout + 5*time.Second

// openRuns returns, per item, the begin event of server's run of it that
// had not ended by at (its items running at that moment). A "ready" event
// is a new process under the same id: what an earlier one (killed) left
// open was measured at its own kill.
func openRuns(evs []Event, server string, at time.Time) map[int]Event {
	open := map[int]Event{}
	for _, e := range evs {
		if e.Server != server || e.T > at.UnixMilli() {
			continue
		}
		if e.Ev == "ready" {
			clear(open)
		}
		if e.Item == nil {
			continue
		}
		switch e.Ev {
		case "begin":
			open[*e.Item] = e
		case "end":
			delete(open, *e.Item)
		}
	}
	return open
}

// openItems returns the items server had open at at, with their epochs.
func openItems(evs []Event, server string, at time.Time) map[int]int64 {
	out := map[int]int64{}
	for it, e := range openRuns(evs, server, at) {
		out[it] = e.Epoch
	}
	return out
}

// openFailoverRuns returns the items server had open at at whose run was a
// failover run, in order.
func openFailoverRuns(evs []Event, server string, at time.Time) []int {
	var out []int
	for it, e := range openRuns(evs, server, at) {
		if e.Failover {
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return out
}

// firstBeginElsewhere returns the first begin of item by a server other than
// victim strictly after at.
func firstBeginElsewhere(evs []Event, item int, victim string, at time.Time) (Event, bool) {
	for _, e := range evs {
		if e.Ev == "begin" && e.ItemNo() == item && e.Server != victim && e.T > at.UnixMilli() {
			return e, true
		}
	}
	return Event{}, false
}

// failoverKills is SHARDFLOW_FAILOVER_KILLS (default 10).
func failoverKills(t *testing.T) int {
	v := os.Getenv("SHARDFLOW_FAILOVER_KILLS")
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("SHARDFLOW_FAILOVER_KILLS=%q: want a positive integer", v)
	}
	return n
}

// TestFailoverAfterKill: SIGKILL of a server mid-run with failover on, with
// busy survivors: every server runs 1.5 s streaming runs on a 1 s cron, so
// a survivor is almost always in a run and, as in ElasticJob, claims the
// crashed server's items only after its current run. Every kill's items
// must run again on a live server (liveness, bounded by failoverHang); the
// latency is measured over SHARDFLOW_FAILOVER_KILLS kills (default 10),
// rotating the victim among the three servers and restarting it each time.
func TestFailoverAfterKill(t *testing.T) {
	t.Parallel()
	for _, st := range failoverStores(t) {
		t.Run(st, func(t *testing.T) {
			c := newStoreCluster(t, st, 6, "--failover", "--streaming", "--run", "1500ms", "--process-delay", "50ms")
			ids := []string{"w1", "w2", "w3"}
			for _, id := range ids {
				c.start(id)
			}
			c.requireOwnership(settle, ids...)
			measureFailover(t, c, "busy", ids, ids, failoverKills(t))
			c.checkInvariants(ids...)
		})
	}
}

// TestFailoverAfterKillIdleSurvivors is TestFailoverAfterKill with idle
// survivors: the victim runs long streaming runs (20 s) while the two
// survivors' runs last 100 ms of every 1 s cron period, so a survivor is
// idle when the victim's session expires and claims at once. The victim,
// always the same server id, is restarted after each kill.
func TestFailoverAfterKillIdleSurvivors(t *testing.T) {
	t.Parallel()
	for _, st := range failoverStores(t) {
		t.Run(st, func(t *testing.T) {
			c := newStoreCluster(t, st, 6, "--failover", "--streaming", "--process-delay", "50ms")
			ids := []string{"s1", "s2", "v"}
			c.start("s1", "--run", "100ms")
			c.start("s2", "--run", "100ms")
			c.start("v", "--run", "20s")
			c.requireOwnership(settle, ids...)
			measureFailover(t, c, "idle", ids, []string{"v"}, failoverKills(t), "--run", "20s")
			c.checkInvariants(ids...)
		})
	}
}

// failoverStores are the stores the failover tests run on, one after the
// other: SHARDFLOW_FAILOVER_STORE, "zk" (the default), "pg" (coord/pgstore,
// the ledger too) or "zk,pg" (make bench-failover STORE=...).
func failoverStores(t *testing.T) []string {
	v := os.Getenv("SHARDFLOW_FAILOVER_STORE")
	if v == "" {
		return []string{"zk"}
	}
	stores := strings.Split(v, ",")
	for _, st := range stores {
		if st != "zk" && st != "pg" {
			t.Fatalf("SHARDFLOW_FAILOVER_STORE=%q: want zk, pg or zk,pg", v)
		}
	}
	return stores
}

// newStoreCluster is newCluster on a ZooKeeper (st "zk") or a Postgres
// (st "pg") of the test's own.
func newStoreCluster(t *testing.T, st string, total int, baseArgs ...string) *cluster {
	t.Helper()
	if st == "pg" {
		pg := integration.StartPostgres(t)
		c := newCluster(t, nil, total, baseArgs...)
		c.coord = pg.DSN()
		return c
	}
	return newCluster(t, integration.StartZooKeeper(t).Servers(), total, baseArgs...)
}

// measureFailover kills a victim (rotating over victims) kills times, each
// time right after a commit of the victim in a run still open, and measures the
// latency: (the first begin on another server of the last of the victim's
// running items) minus (the kill time). A kill that still lands between two
// runs (no item open) is measured to the next begin elsewhere of the
// victim's owned items, and its line says so (between-runs). The test fails
// when some item does not run again within failoverHang. p50 and max are
// logged in a parseable FAILOVER line and, with SHARDFLOW_BENCH_OUT set,
// written to $SHARDFLOW_BENCH_OUT/failover-{label}.txt. The victim is
// restarted with restartArgs after each kill; after the last restart every
// item must run again.
func measureFailover(t *testing.T, c *cluster, label string, ids, victims []string, kills int, restartArgs ...string) {
	t.Helper()
	var latencies []time.Duration
	var lines []string
	var healed time.Time   // the last restart's ownership settled
	var lastKill time.Time // the last SIGKILL: the items are begun again after it
	for k := range kills {
		victim := victims[k%len(victims)]
		w := c.worker(victim)
		// Aim mid-run: wait for a commit of the victim, after this round
		// started, of an item whose run is still open (its run may have
		// begun before the round: the idle variant's runs are long).
		round := time.Now()
		c.log.waitFor(t, settle, victim+" committing in a run", func(evs []Event) bool {
			open := map[int]bool{}
			committed := map[int]bool{}
			for _, e := range evs {
				if e.Server != victim || e.Item == nil {
					continue
				}
				switch e.Ev {
				case "begin":
					open[*e.Item], committed[*e.Item] = true, false
				case "end":
					delete(open, *e.Item)
				case "commit":
					if open[*e.Item] && e.T > round.UnixMilli() {
						committed[*e.Item] = true
					}
				}
			}
			for it := range open {
				if committed[it] {
					return true
				}
			}
			return false
		})
		killed := w.kill()
		lastKill = killed
		w.wait()
		open := openItems(c.log.all(), victim, killed)
		mode := "mid-run"
		items := slices.Sorted(maps.Keys(open))
		if len(items) == 0 {
			mode = "between-runs"
			st := c.status(10 * time.Second)
			for _, s := range st.Servers {
				if s.ID == victim {
					items = s.Sharding
				}
			}
		}
		evs := c.log.waitFor(t, failoverHang, fmt.Sprintf("kill %d: %s's items %v begun on a live server (liveness bound %v)", k+1, victim, items, failoverHang), func(evs []Event) bool {
			for _, it := range items {
				if _, ok := firstBeginElsewhere(evs, it, victim, killed); !ok {
					return false
				}
			}
			return true
		})
		// The victim's open items that were failover runs (claimed from an
		// earlier kill): the leader's scan queues a crashed server's normal
		// run only, so such an item waits for its owner's next trigger
		// (docs/benchmarks.md, "Failover latency after SIGKILL").
		var claimed []int
		if mode == "mid-run" {
			claimed = openFailoverRuns(c.log.all(), victim, killed)
		}
		var last time.Time
		var via []string
		for _, it := range items {
			b, _ := firstBeginElsewhere(evs, it, victim, killed)
			if b.Time().After(last) {
				last = b.Time()
			}
			via = append(via, fmt.Sprintf("%d->%s(failover=%v)", it, b.Server, b.Failover))
		}
		lat := last.Sub(killed)
		latencies = append(latencies, lat)
		line := fmt.Sprintf("kill %d victim=%s mode=%s items=%v victim-failover-runs=%v latency=%v load1=%s via %s\n\ttimeline: %s", k+1, victim, mode, items, claimed, lat.Round(time.Millisecond), loadAvg1(), strings.Join(via, " "),
			failoverTimeline(c.dir, evs, items, victim, killed, last))
		lines = append(lines, line)
		t.Log(line)

		// Restart the victim under the same id: its old session must have
		// expired first (ErrServerIDInUse otherwise; the worker retries).
		c.start(victim, restartArgs...)
		c.requireOwnership(settle, ids...)
		healed = time.Now()
	}
	if kills > 0 {
		c.requireEveryItemRanAgainAfter(lastKill, healed)
	}
	p50, pmax := percentile(latencies, 50), percentile(latencies, 100)
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], ",")
	}
	storeName := "zk"
	if c.coord != "" {
		storeName = "pg"
		label += "-pg"
	}
	summary := fmt.Sprintf("FAILOVER survivors=%s store=%s kills=%d session_timeout=%v p50=%v max=%v loadavg=%s cpus=%d",
		strings.TrimSuffix(label, "-pg"), storeName, kills, sessionTimeout, p50.Round(time.Millisecond), pmax.Round(time.Millisecond), load, runtime.NumCPU())
	t.Log(summary)
	if dir := os.Getenv("SHARDFLOW_BENCH_OUT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "failover-"+label+".txt")
		body := summary + "\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(out, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
}

// loadAvg1 returns the 1-minute load average, or "?".
func loadAvg1() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// timelineSteps names the workers' log messages (coord, at Info) that mark
// a failover's steps: the leader sees the victim's status node gone (its
// session expired), a survivor is elected when the victim led, the leader
// queues the victim's items, survivors claim them.
var timelineSteps = map[string]string{
	"servers went offline":              "offline",
	"elected leader":                    "elected",
	"queued crashed items for failover": "queued",
	"claimed failover item":             "claimed",
	// A claim lost with its claimant's session (the victim killed in a
	// failover run), its item queued again (coord/internal/layout/claimrecord.go).
	"failover claim lost with its claimant's session: item queued again": "requeued",
}

// slogLine matches a worker's log line (slog's text handler), slogItems
// its item, items or servers attribute.
var (
	slogLine  = regexp.MustCompile(`^time=(\S+) level=\S+ msg=(?:"([^"]*)"|(\S+)) server=(\S+)`)
	slogItems = regexp.MustCompile(` (?:items?|servers)=(?:"([^"]*)"|(\S+))`)
)

// failoverTimeline returns a kill's steps, times after the kill: from the
// workers' stderr logs in dir (see timelineSteps), then the first begin of
// each of items on a live server from evs, in time order, e.g.
// "+2.104s w2 offline [w1]; +2.160s w2 queued [2 3]; +2.190s w3 claimed 2;
// +2.230s w3 begin 2 failover". Steps after last (the latency's end) are
// left out.
func failoverTimeline(dir string, evs []Event, items []int, victim string, killed, last time.Time) string {
	type step struct {
		at   time.Time
		what string
	}
	var steps []step
	files, _ := filepath.Glob(filepath.Join(dir, "*.stderr"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ln := range strings.Split(string(b), "\n") {
			m := slogLine.FindStringSubmatch(ln)
			if m == nil {
				continue
			}
			name, ok := timelineSteps[m[2]+m[3]]
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil || !at.After(killed) || at.After(last) {
				continue
			}
			what := m[4] + " " + name
			if im := slogItems.FindStringSubmatch(ln); im != nil {
				what += " " + im[1] + im[2]
			}
			steps = append(steps, step{at, what})
		}
	}
	for _, it := range items {
		if b, ok := firstBeginElsewhere(evs, it, victim, killed); ok {
			what := fmt.Sprintf("%s begin %d", b.Server, it)
			if b.Failover {
				what += " failover"
			}
			steps = append(steps, step{b.Time(), what})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = fmt.Sprintf("+%.3fs %s", s.at.Sub(killed).Seconds(), s.what)
	}
	return strings.Join(out, "; ")
}

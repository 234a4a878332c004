package faults

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// failoverBound is the bound: a killed server's running items run
// again on a live server within the session timeout plus one second.
const failoverBound = sessionTimeout + time.Second

// openItems returns the items server had begun and not ended by at (its
// items running at that moment), with their epochs.
func openItems(evs []Event, server string, at time.Time) map[int]int64 {
	open := map[int]int64{}
	for _, e := range evs {
		if e.Server != server || e.Item == nil || e.T > at.UnixMilli() {
			continue
		}
		switch e.Ev {
		case "begin":
			open[*e.Item] = e.Epoch
		case "end":
			delete(open, *e.Item)
		}
	}
	return open
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

// TestFailoverAfterKill: SIGKILL of a server mid-run with failover on: its
// items run again on a live server within the session timeout plus one
// second. Repeated SHARDFLOW_FAILOVER_KILLS times (default 10), restarting
// the killed worker each time; the latency of each kill is (the first begin
// on another server of the last of the killed server's running items) minus
// (the kill time). p50 and max are logged in a parseable line and written to
// $SHARDFLOW_BENCH_OUT/failover.txt when that is set.
//
// Kills are aimed mid-run (right after the victim's first commit of a run),
// so "its items" are the items it was running; should a kill still land
// between two runs (no item open), the latency is measured to the next begin
// of the victim's owned items elsewhere, and the line says so (between-runs).
func TestFailoverAfterKill(t *testing.T) {
	kills := 10
	if v := os.Getenv("SHARDFLOW_FAILOVER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SHARDFLOW_FAILOVER_KILLS=%q: want a positive integer", v)
		}
		kills = n
	}
	zk := integration.StartZooKeeper(t)
	// Streaming runs of 1.5 s every second: items are running most of the
	// time, so kills land mid-run; short batches keep the others' runs (and
	// so the point where they claim failover items) short.
	c := newCluster(t, zk.Servers(), 6, "--failover", "--streaming", "--run", "1500ms", "--process-delay", "50ms")
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.start(id)
	}
	c.requireOwnership(settle, ids...)

	var latencies []time.Duration
	var lines []string
	for k := range kills {
		victim := ids[k%len(ids)]
		w := c.worker(victim)
		// Aim mid-run: wait for the victim's first commit of a run begun
		// after this round started.
		round := time.Now()
		c.log.waitFor(t, settle, victim+" committing in a run", func(evs []Event) bool {
			began := map[int]bool{}
			for _, e := range evs {
				if e.Server != victim || e.T <= round.UnixMilli() {
					continue
				}
				if e.Ev == "begin" {
					began[e.ItemNo()] = true
				}
				if e.Ev == "commit" && began[e.ItemNo()] {
					return true
				}
			}
			return false
		})
		killed := w.kill()
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
		evs := c.log.waitFor(t, 30*time.Second, fmt.Sprintf("kill %d: %s's items %v begun elsewhere", k+1, victim, items), func(evs []Event) bool {
			for _, it := range items {
				if _, ok := firstBeginElsewhere(evs, it, victim, killed); !ok {
					return false
				}
			}
			return true
		})
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
		line := fmt.Sprintf("kill %d victim=%s mode=%s items=%v latency=%v via %s", k+1, victim, mode, items, lat.Round(time.Millisecond), strings.Join(via, " "))
		lines = append(lines, line)
		t.Log(line)
		if lat > failoverBound {
			t.Errorf("kill %d: %s's items ran again elsewhere %v after the kill; want within the session timeout + 1s = %v", k+1, victim, lat.Round(time.Millisecond), failoverBound)
		}

		// Restart the victim under the same id: its old session must have
		// expired first (ErrServerIDInUse otherwise), which it has since its
		// items ran elsewhere.
		c.start(victim)
		c.requireOwnership(settle, ids...)
	}
	p50, pmax := percentile(latencies, 50), percentile(latencies, 100)
	summary := fmt.Sprintf("FAILOVER kills=%d session_timeout=%v p50=%v max=%v bound=%v", kills, sessionTimeout, p50.Round(time.Millisecond), pmax.Round(time.Millisecond), failoverBound)
	t.Log(summary)
	if dir := os.Getenv("SHARDFLOW_BENCH_OUT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "failover.txt")
		body := summary + "\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(out, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
	c.checkInvariants(ids...)
}

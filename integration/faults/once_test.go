package faults

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// onceCron fires every 3 s on seconds divisible by 3; since minutes are
// whole multiples of 3 s, run k of the schedule starts in the window
// [3000k, 3000k+3000) ms of Unix time, which is how events are assigned to
// runs below (runs last well under the period).
const (
	onceCron   = "0/3 * * * * ?"
	oncePeriod = 3 * time.Second
)

func window(e Event) int64 { return e.T / oncePeriod.Milliseconds() }

// onceCounts counts "once" events per window and phase, and the servers
// that began items per window.
func onceCounts(evs []Event) (once map[int64]map[string]int, begun map[int64]map[string]bool) {
	once, begun = map[int64]map[string]int{}, map[int64]map[string]bool{}
	for _, e := range evs {
		w := window(e)
		switch e.Ev {
		case "once":
			if once[w] == nil {
				once[w] = map[string]int{}
			}
			once[w][e.Phase]++
		case "begin":
			if begun[w] == nil {
				begun[w] = map[string]bool{}
			}
			begun[w][e.Server] = true
		}
	}
	return once, begun
}

// TestDistributeOnce: distribute-once listeners across three workers: the
// callback runs exactly once per run (per phase, counted per run window),
// and the timeout path works when a server dies mid-run: SIGKILL one during
// a run, the others' once-wait times out and the job keeps triggering, again
// exactly once per run.
//
// Not parallel: it counts callbacks per 3 s cron window, which holds only
// while runs stay well inside their window; the other fault tests' worker
// processes and ZooKeeper JVMs starting at once slowed 800 ms runs to 3 s
// and failed it (two callbacks in one window, none in the next).
func TestDistributeOnce(t *testing.T) {
	zk := integration.StartZooKeeper(t)
	c := newCluster(t, zk.Servers(), 6, "--cron", onceCron, "--once", "--once-timeout", "2s",
		"--streaming", "--run", "800ms", "--process-delay", "50ms")
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.start(id)
	}
	c.requireOwnership(settle, ids...)
	steady := time.Now()

	// Exactly once per run while all three run: wait for 4 full runs.
	evs := c.log.waitFor(t, 8*oncePeriod, "4 runs in which all three servers began items", func(evs []Event) bool {
		_, begun := onceCounts(filter(evs, func(e Event) bool { return e.T > steady.UnixMilli() }))
		n := 0
		for w, servers := range begun {
			if len(servers) == 3 && w < time.Now().UnixMilli()/oncePeriod.Milliseconds()-1 {
				n++
			}
		}
		return n >= 4
	})
	checkOncePerRun(t, evs, 3, steady, time.Now())

	// Kill w3 mid-run: right after it began in a run.
	round := time.Now()
	c.log.waitFor(t, 2*oncePeriod, "w3 running", func(evs []Event) bool { return len(beganSince(evs, "w3", round)) > 0 })
	killed := c.worker("w3").kill()
	c.worker("w3").wait()
	killWindow := killed.UnixMilli() / oncePeriod.Milliseconds()
	c.requireOwnership(sessionTimeout+settle, "w1", "w2")
	recovered := time.Now()
	c.log.waitFor(t, 8*oncePeriod, "3 runs by w1 and w2 after the kill", func(evs []Event) bool {
		_, begun := onceCounts(filter(evs, func(e Event) bool { return e.T > recovered.UnixMilli() }))
		n := 0
		for w, servers := range begun {
			if len(servers) == 2 && w < time.Now().UnixMilli()/oncePeriod.Milliseconds()-1 {
				n++
			}
		}
		return n >= 3
	})
	all := c.log.all()
	once, _ := onceCounts(all)
	for w := killWindow; w <= recovered.UnixMilli()/oncePeriod.Milliseconds(); w++ {
		t.Logf("window %d (kill window %d): once started=%d completed=%d", w, killWindow, once[w]["started"], once[w]["completed"])
		for phase, n := range once[w] {
			if n > 1 {
				t.Errorf("window %d: %d %q callbacks around the kill, want at most 1", w, n, phase)
			}
		}
	}
	var timeouts int
	for _, e := range all {
		if e.Ev == "error" && e.T > killed.UnixMilli() && (strings.Contains(e.Err, "distribute-once") || strings.Contains(e.Err, "timed out")) {
			timeouts++
		}
	}
	t.Logf("once-wait timeouts reported after the kill: %d", timeouts)
	checkOncePerRun(t, all, 2, recovered, time.Now())
	c.checkInvariants("w1", "w2")
}

// checkOncePerRun asserts that every complete run window after since (all
// servers began items in it, and it ended before now) saw exactly one
// "started" and one "completed" callback, and no window saw more than one.
func checkOncePerRun(t *testing.T, evs []Event, servers int, since, now time.Time) {
	t.Helper()
	first := since.UnixMilli()/oncePeriod.Milliseconds() + 1 // the first whole window
	evs = filter(evs, func(e Event) bool { return window(e) >= first })
	once, begun := onceCounts(evs)
	current := now.UnixMilli() / oncePeriod.Milliseconds()
	var windows []int64
	for w := range begun {
		windows = append(windows, w)
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
	checked := 0
	for _, w := range windows {
		if len(begun[w]) != servers || w >= current {
			continue
		}
		checked++
		for _, phase := range []string{"started", "completed"} {
			if n := once[w][phase]; n != 1 {
				t.Errorf("run window %d (%s): %d %q callbacks across %d servers, want exactly 1", w,
					time.UnixMilli(w*oncePeriod.Milliseconds()).Format("15:04:05"), n, phase, servers)
			}
		}
	}
	for w, phases := range once {
		for phase, n := range phases {
			if n > 1 {
				t.Errorf("window %d: %d %q callbacks, want at most 1", w, n, phase)
			}
		}
	}
	if checked == 0 {
		t.Errorf("no complete run window to check (windows with begins: %v)", fmt.Sprint(windows))
	}
	t.Logf("checked %d run windows of %d servers: exactly one started and one completed callback each", checked, servers)
}

package faults

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
)

// onceCron fires every 6 s on seconds divisible by 6; since minutes are
// whole multiples of 6 s, run k of the schedule starts in the window
// [6000k, 6000k+6000) ms of Unix time, which is how events are assigned to
// runs below. A run must end inside its window: onceRun plus both barriers
// waiting out onceTimeout (a server late to a run) is 4.5 s, so even such a
// run ends before the next fire, and the next run starts aligned on every
// server again. (With 3 s, 800 ms runs and 2 s timeouts, one late server
// made every run 5 s long: each missed the next fire, misfire runs followed
// and the servers never met at a barrier again.)
const (
	onceCron    = "0/6 * * * * ?"
	oncePeriod  = 6 * time.Second
	onceRun     = 500 * time.Millisecond
	onceTimeout = 2 * time.Second
)

// window is the run window of e: a "once" event's by the start of the run
// it belongs to (a callback of a run slowed past its window, on a loaded
// machine, still counts for that run: CI, 2026-11-26, where a late
// completion was counted in the next window beside that window's own);
// other events' by their time.
func window(e Event) int64 {
	t := e.T
	if e.Run != 0 {
		t = e.Run
	}
	return t / oncePeriod.Milliseconds()
}

// onceCounts counts "once" events per window and phase, the servers that
// began items per window, and the windows in which a server reported a
// distribute-once barrier timeout.
func onceCounts(evs []Event) (once map[int64]map[string]int, begun map[int64]map[string]bool, timedOut map[int64]bool) {
	once, begun, timedOut = map[int64]map[string]int{}, map[int64]map[string]bool{}, map[int64]bool{}
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
		case "error":
			if strings.Contains(e.Err, "distribute-once") {
				timedOut[w] = true
			}
		}
	}
	return once, begun, timedOut
}

// metWindows returns the whole windows after since and ended before now in
// which all servers began items and no barrier timed out: the runs in which
// every server reached both barriers in time, where the callback must run
// exactly once per phase.
func metWindows(evs []Event, servers int, since, now time.Time) []int64 {
	first := since.UnixMilli()/oncePeriod.Milliseconds() + 1
	current := now.UnixMilli() / oncePeriod.Milliseconds()
	_, begun, timedOut := onceCounts(evs)
	var ws []int64
	for w, who := range begun {
		if w >= first && w < current && len(who) == servers && !timedOut[w] {
			ws = append(ws, w)
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	return ws
}

// TestDistributeOnce: distribute-once listeners across three workers: the
// callback runs exactly once per run (per phase, counted per run window),
// and the timeout path works when a server dies mid-run: SIGKILL one during
// a run, the others' once-wait times out and the job keeps triggering, again
// exactly once per run.
//
// A run in which a server reached a barrier late (its barrier timed out,
// which the job reports) is held to at most one callback, not exactly one:
// that is the timeout path's contract.
func TestDistributeOnce(t *testing.T) {
	t.Parallel()
	zk := integration.StartZooKeeper(t)
	c := newCluster(t, zk.Servers(), 6, "--cron", onceCron, "--once", "--once-timeout", onceTimeout.String(),
		"--streaming", "--run", onceRun.String(), "--process-delay", "50ms")
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.start(id)
	}
	c.requireOwnership(settle, ids...)
	steady := time.Now()

	// Exactly once per run while all three run: wait for 4 runs in which
	// all three met at both barriers.
	evs := c.log.waitFor(t, 12*oncePeriod, "4 runs in which all three servers began items and no barrier timed out", func(evs []Event) bool {
		return len(metWindows(evs, 3, steady, time.Now())) >= 4
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
	c.log.waitFor(t, 12*oncePeriod, "3 runs by w1 and w2 after the kill in which both met at both barriers", func(evs []Event) bool {
		return len(metWindows(evs, 2, recovered, time.Now())) >= 3
	})
	all := c.log.all()
	once, _, _ := onceCounts(all)
	for w := killWindow; w <= recovered.UnixMilli()/oncePeriod.Milliseconds(); w++ {
		t.Logf("window %d (kill window %d): once started=%d completed=%d", w, killWindow, once[w]["started"], once[w]["completed"])
		for phase, n := range once[w] {
			if n > 1 {
				t.Errorf("window %d: %d %q callbacks around the kill, want at most 1:\n%s", w, n, phase, onceEvents(all, w))
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
	c.requireEveryItemRanAgain(recovered)
	c.checkInvariants("w1", "w2")
}

// onceEvents lists the "once" events of window w, for a failure message.
func onceEvents(evs []Event, w int64) string {
	return tail(filter(evs, func(e Event) bool { return e.Ev == "once" && window(e) == w }), 20)
}

// checkOncePerRun asserts that every run window after since in which all
// servers met at both barriers (metWindows) saw exactly one "started" and
// one "completed" callback, and that no window at all saw more than one.
func checkOncePerRun(t *testing.T, evs []Event, servers int, since, now time.Time) {
	t.Helper()
	met := metWindows(evs, servers, since, now)
	first := since.UnixMilli()/oncePeriod.Milliseconds() + 1 // the first whole window
	once, _, timedOut := onceCounts(filter(evs, func(e Event) bool { return window(e) >= first }))
	for _, w := range met {
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
				t.Errorf("window %d: %d %q callbacks, want at most 1:\n%s", w, n, phase, onceEvents(evs, w))
			}
		}
	}
	if len(met) == 0 {
		t.Errorf("no run window in which all %d servers met at both barriers", servers)
	}
	t.Logf("checked %d run windows of %d servers: exactly one started and one completed callback each (%d windows with a barrier timeout held to at most one)", len(met), servers, len(timedOut))
}

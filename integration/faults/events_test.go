package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Event is one JSON line of a testworker (see its package documentation).
type Event struct {
	Ev       string `json:"ev"`
	Server   string `json:"server"`
	Item     *int   `json:"item"`
	Epoch    int64  `json:"epoch"`
	Failover bool   `json:"failover"`
	Seq      int64  `json:"seq"`
	// Checked, on commits, is when the fencing check returned nil (Unix ms).
	Checked int64  `json:"checked"`
	Phase   string `json:"phase"`
	Reason  string `json:"reason"`
	Err     string `json:"err"`
	// Run, on "once" events, is when the run of the callback started on
	// its server (Unix ms).
	Run int64 `json:"run"`
	// T is the worker's clock at the event, Unix milliseconds. Workers run
	// on the test's host, so T is comparable with the test's time.Now.
	T int64 `json:"t"`
}

// Time returns T as a time.Time.
func (e Event) Time() time.Time { return time.UnixMilli(e.T) }

// ItemNo returns the item, or -1 for events without one.
func (e Event) ItemNo() int {
	if e.Item == nil {
		return -1
	}
	return *e.Item
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", time.UnixMilli(e.T).Format("15:04:05.000"), e.Server, e.Ev)
	if e.Item != nil {
		fmt.Fprintf(&b, " item=%d epoch=%d", *e.Item, e.Epoch)
	}
	if e.Failover {
		b.WriteString(" failover")
	}
	if e.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", e.Seq)
	}
	for _, s := range []string{e.Phase, e.Reason, e.Err} {
		if s != "" {
			b.WriteString(" " + s)
		}
	}
	return b.String()
}

// parseEvent decodes one worker line; lines that are not JSON objects are
// reported as errors so that protocol drift fails loudly.
func parseEvent(line []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return e, fmt.Errorf("faults: worker line %q is not a JSON event: %w", line, err)
	}
	if e.Ev == "" {
		return e, fmt.Errorf("faults: worker line %q has no \"ev\" field", line)
	}
	return e, nil
}

// eventLog collects the events of every worker of a test in arrival order.
// Safe for concurrent use: each worker's reader goroutine appends, the test
// reads and waits.
type eventLog struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced at every append
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// snapshot returns a copy of every event so far and a channel closed at the
// next append.
func (l *eventLog) snapshot() ([]Event, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...), l.changed
}

// all returns a copy of every event so far.
func (l *eventLog) all() []Event {
	evs, _ := l.snapshot()
	return evs
}

// waitFor blocks until cond holds for the events so far, re-checking at
// every new event and every 200ms (conditions may depend on the clock), or
// fails the test after timeout with what and the last events.
func (l *eventLog) waitFor(t testing.TB, timeout time.Duration, what string, cond func([]Event) bool) []Event {
	t.Helper()
	evs, err := l.await(context.Background(), timeout, cond)
	if err != nil {
		t.Fatalf("faults: waited %v for %s: %v\nlast events:\n%s", timeout, what, err, tail(evs, 40))
	}
	return evs
}

// await is waitFor without the test: it returns the events and nil when
// cond holds, or the events and an error at the deadline.
func (l *eventLog) await(ctx context.Context, timeout time.Duration, cond func([]Event) bool) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		evs, changed := l.snapshot()
		if cond(evs) {
			return evs, nil
		}
		select {
		case <-ctx.Done():
			return evs, ctx.Err()
		case <-changed:
		case <-tick.C:
		}
	}
}

// tail formats the last n events, one per line.
func tail(evs []Event, n int) string {
	if len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	var b strings.Builder
	for _, e := range evs {
		b.WriteString("  " + e.String() + "\n")
	}
	return b.String()
}

// filter returns the events for which keep is true.
func filter(evs []Event, keep func(Event) bool) []Event {
	var out []Event
	for _, e := range evs {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

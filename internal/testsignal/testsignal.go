// Package testsignal lets production code tell a test that something
// happened ("resharded", "elected", "queued for failover", "config
// applied"), so that the test waits for that event instead of polling the
// state it leaves. It follows river's testsignal: the hooks live in the
// production type, cost one nil check when no test listens, and only tests
// turn them on (Init).
//
// The package is internal: programs that import shardflow cannot turn the
// signals on, and leave the fields that carry them (protocol.RegistryConfig,
// dataflow.NodeConfig) nil.
package testsignal

import (
	"fmt"
	"time"
)

// capacity is how many unread events a signal keeps: more than any test
// produces; a full signal panics rather than block the protocol or drop an
// event a test may be waiting for.
const capacity = 1024

// Signal carries events of one kind to a test. Its zero value is off:
// Send does nothing. Safe for concurrent use once Init has returned.
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on. Call it before the code that sends starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Send delivers v to the test, if the signal is on. It never blocks.
func (s *Signal[T]) Send(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic(fmt.Sprintf("testsignal: %d unread %T events; the test does not read this signal", capacity, v))
	}
}

// TB is the part of testing.TB Wait uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Wait returns the first event, sent before or after the call, for which
// match holds (nil: any), discarding the ones before it. It fails t naming
// what it waited for when none comes within timeout.
func (s *Signal[T]) Wait(t TB, timeout time.Duration, what string, match func(T) bool) T {
	t.Helper()
	if s.ch == nil {
		t.Fatalf("testsignal: waiting for %s on a signal that was not Init", what)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var seen []T
	for {
		select {
		case v := <-s.ch:
			if match == nil || match(v) {
				return v
			}
			seen = append(seen, v)
		case <-timer.C:
			t.Fatalf("testsignal: waited %v for %s; other events seen: %+v", timeout, what, seen)
			var zero T
			return zero
		}
	}
}

// Coord are the coordination protocol's events. Every event names the
// server (RegistryConfig.ServerID) and job it happened on, so that the
// servers of one test can share one Coord.
type Coord struct {
	// Elected: the server became the job's leader.
	Elected Signal[Event]
	// Resharded: the leader wrote a new assignment over Servers.
	Resharded Signal[Resharded]
	// FailoverQueued: the leader queued a dead server's items for failover.
	FailoverQueued Signal[Queued]
	// ConfigApplied: the server decoded an edited stored config; Err is
	// set when it was invalid (the job refuses runs until it is fixed).
	ConfigApplied Signal[ConfigApplied]
}

// NewCoord returns a Coord with every signal on.
func NewCoord() *Coord {
	c := &Coord{}
	c.Elected.Init()
	c.Resharded.Init()
	c.FailoverQueued.Init()
	c.ConfigApplied.Init()
	return c
}

// Event is where an event happened.
type Event struct {
	Job, Server string
}

// Resharded is a reshard's outcome.
type Resharded struct {
	Event
	Servers []string // the live servers the items were spread over
	Total   int
}

// Queued is a failover queueing.
type Queued struct {
	Event
	Items []int
}

// ConfigApplied is a config edit taken into account.
type ConfigApplied struct {
	Event
	Err error
}

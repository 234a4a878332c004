package dataflow

import (
	"testing"
	"time"
)

// TestCompleteContextsSharedPerSecond: completions starting in the same
// second share one context; each gets completeTimeout to 1 s more; the
// next second's does not end the last one's early.
func TestCompleteContextsSharedPerSecond(t *testing.T) {
	var c completeContexts
	t0 := time.Now().Add(time.Hour).Truncate(time.Second) // deadlines ahead
	a := c.at(t0.Add(100 * time.Millisecond))
	if b := c.at(t0.Add(900 * time.Millisecond)); b != a {
		t.Fatal("two completions in one second got two contexts")
	}
	for _, now := range []time.Time{t0.Add(100 * time.Millisecond), t0.Add(999 * time.Millisecond)} {
		d, ok := c.at(now).Deadline()
		if left := d.Sub(now); !ok || left < completeTimeout || left > completeTimeout+time.Second {
			t.Fatalf("at %v: deadline %v (%v, %v left), want completeTimeout to 1 s more", now, d, ok, left)
		}
	}
	next := c.at(t0.Add(1100 * time.Millisecond))
	if next == a {
		t.Fatal("the next second's completions share the last second's context")
	}
	if a.Err() != nil || next.Err() != nil {
		t.Fatalf("contexts ended before their deadlines: %v, %v", a.Err(), next.Err())
	}
}

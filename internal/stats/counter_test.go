package stats

import (
	"sync"
	"testing"
)

func TestCounter(t *testing.T) {
	var c Counter
	c.Add(3, 1)
	c.Add(0, 2)
	if s, f := c.Snapshot(); s != 3 || f != 3 {
		t.Fatalf("Snapshot = %d, %d; want 3, 3", s, f)
	}
	if s, f := c.Drain(); s != 3 || f != 3 {
		t.Fatalf("Drain = %d, %d; want 3, 3", s, f)
	}
	if s, f := c.Drain(); s != 0 || f != 0 {
		t.Fatalf("second Drain = %d, %d; want 0, 0", s, f)
	}
	c.Add(5, 0)
	c.Restore(3, 3)
	if s, f := c.Drain(); s != 8 || f != 3 {
		t.Fatalf("Drain after Restore = %d, %d; want 8, 3", s, f)
	}
	if s, f := c.Snapshot(); s != 8 || f != 3 {
		t.Fatalf("Snapshot after Restore = %d, %d; want totals 8, 3 (Restore must not count twice)", s, f)
	}
}

// TestCounterConcurrentDrain: with writers and a drainer racing, every
// count lands in exactly one Drain.
func TestCounterConcurrentDrain(t *testing.T) {
	const writers, perWriter = 8, 10000
	var c Counter
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var drained [2]int64
	drainerDone := make(chan struct{})
	go func() {
		defer close(drainerDone)
		for {
			s, f := c.Drain()
			drained[0] += s
			drained[1] += f
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	for range writers {
		wg.Go(func() {
			for i := range perWriter {
				c.Add(1, int64(i%2))
			}
		})
	}
	wg.Wait()
	close(stop)
	<-drainerDone
	s, f := c.Drain()
	drained[0] += s
	drained[1] += f
	if drained[0] != writers*perWriter || drained[1] != writers*perWriter/2 {
		t.Fatalf("drained %v, want [%d %d]", drained, writers*perWriter, writers*perWriter/2)
	}
	if s, f := c.Snapshot(); s != writers*perWriter || f != writers*perWriter/2 {
		t.Fatalf("Snapshot = %d, %d", s, f)
	}
}

func BenchmarkCounterAdd(b *testing.B) {
	var c Counter
	for b.Loop() {
		c.Add(1, 0)
	}
}

func BenchmarkCounterAddParallel(b *testing.B) {
	var c Counter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1, 0)
		}
	})
}

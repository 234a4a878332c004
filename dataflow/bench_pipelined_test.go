package dataflow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The I/O-bound shape: one shard item, Fetch takes ioFetchLatency and
// returns ioFetch items, Process takes ioProcessLatency per item on
// ioThreads workers, ioBatches batches per run. The ideal rate is
// min(fetch rate, process rate) = min(200/20ms, 8/1ms) = 8,000 items/s:
// processing-bound, with every fetch hidden behind processing.
const (
	ioFetchLatency   = 20 * time.Millisecond
	ioProcessLatency = time.Millisecond
	ioFetch          = 200
	ioThreads        = 8
	ioBatches        = 20
	ioTotal          = ioFetch * ioBatches
)

// ioIdealRate is the ideal items/s: min(fetch rate, process rate).
var ioIdealRate = min(
	float64(ioFetch)/ioFetchLatency.Seconds(),
	float64(ioThreads)/ioProcessLatency.Seconds())

// ioJob is the I/O-bound job: its sleeps are the workload.
type ioJob struct {
	buf          []int
	left         atomic.Int64
	fetchLatency time.Duration
	procLatency  time.Duration
}

func newIOJob(fetchLatency, procLatency time.Duration) *ioJob {
	j := &ioJob{buf: make([]int, ioFetch), fetchLatency: fetchLatency, procLatency: procLatency}
	j.left.Store(ioTotal)
	return j
}

func (j *ioJob) Fetch(context.Context, Shard) ([]int, error) {
	time.Sleep(j.fetchLatency)
	n := min(int64(ioFetch), j.left.Load())
	j.left.Add(-n)
	return j.buf[:n], nil
}

func (j *ioJob) Process(context.Context, Shard, int) error {
	time.Sleep(j.procLatency)
	return nil
}

func runIO(b *testing.B, j *ioJob, pipelined bool) time.Duration {
	start := time.Now()
	res := runJob(context.Background(), j, shardsFor(1, ioFetch), pipelineConfig{
		Threads: ioThreads, Streaming: true, PipelinedFetch: pipelined,
	})
	d := time.Since(start)
	if res.Success != ioTotal {
		b.Fatalf("processed %d, want %d", res.Success, ioTotal)
	}
	return d
}

// sleepCeilings measures what the sleeps alone allow on this machine right
// now: ioBatches back-to-back fetch sleeps, and ioThreads goroutines each
// doing its share of the process sleeps back to back (no pipeline at all).
// A loaded machine oversleeps, so these rates are below the nominal ones.
func sleepCeilings() (fetchTime, processTime time.Duration) {
	start := time.Now()
	for range ioBatches {
		time.Sleep(ioFetchLatency)
	}
	fetchTime = time.Since(start)
	start = time.Now()
	var wg sync.WaitGroup
	for range ioThreads {
		wg.Go(func() {
			for range ioTotal / ioThreads {
				time.Sleep(ioProcessLatency)
			}
		})
	}
	wg.Wait()
	return fetchTime, time.Since(start)
}

// BenchmarkPipelinedFetch runs the I/O-bound job with and without
// PipelinedFetch in every iteration (rotating order), and the bare sleeps
// (sleepCeilings) beside them. It reports items/s of each, their ratio to
// the nominal ideal of 8,000 items/s (ideal-ratio), and their ratio to the
// ideal measured from the bare sleeps, min(fetch rate, process rate)
// (measured-ratio): on a loaded machine the sleeps themselves overrun,
// which no fetch strategy can win back.
func BenchmarkPipelinedFetch(b *testing.B) {
	var off, on, fetchOnly, procOnly time.Duration
	i := 0
	for b.Loop() {
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				off += runIO(b, newIOJob(ioFetchLatency, ioProcessLatency), false)
			case 1:
				on += runIO(b, newIOJob(ioFetchLatency, ioProcessLatency), true)
			case 2:
				f, p := sleepCeilings()
				fetchOnly += f
				procOnly += p
			}
		}
		i++
	}
	n := float64(ioTotal) * float64(b.N)
	rOff, rOn := n/off.Seconds(), n/on.Seconds()
	measured := min(n/fetchOnly.Seconds(), n/procOnly.Seconds())
	b.ReportMetric(rOff, "off-items/s")
	b.ReportMetric(rOn, "on-items/s")
	b.ReportMetric(measured, "measured-ideal-items/s")
	b.ReportMetric(rOff/ioIdealRate, "off-ideal-ratio")
	b.ReportMetric(rOn/ioIdealRate, "on-ideal-ratio")
	b.ReportMetric(rOff/measured, "off-measured-ratio")
	b.ReportMetric(rOn/measured, "on-measured-ratio")
}

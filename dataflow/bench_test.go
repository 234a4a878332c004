package dataflow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// Benchmark shape: 8 shard items x 125,000 items = 1M no-op items per run,
// FetchDataCount 1000, 8 workers per shard item, streaming until empty.
const (
	benchItems   = 8
	benchPerItem = 125_000
	benchFetch   = 1000
	benchThreads = 8
)

// benchJob serves benchPerItem values per shard item from one shared
// read-only slice: Fetch allocates nothing, Process does nothing, so the
// benchmark measures the pipeline's own cost.
type benchJob struct {
	buf  []int
	left [benchItems]atomic.Int64
}

func newBenchJob() *benchJob {
	j := &benchJob{buf: make([]int, benchFetch)}
	for i := range j.buf {
		j.buf[i] = i
	}
	for i := range j.left {
		j.left[i].Store(benchPerItem)
	}
	return j
}

func (j *benchJob) Fetch(_ context.Context, s Shard) ([]int, error) {
	left := &j.left[s.Item]
	n := min(int64(s.FetchCount), left.Load())
	left.Add(-n)
	return j.buf[:n], nil
}

func (j *benchJob) Process(context.Context, Shard, int) error { return nil }

type benchCounter struct{ s, f atomic.Int64 }

func (c *benchCounter) Add(s, f int64) { c.s.Add(s); c.f.Add(f) }

const benchTotal = benchItems * benchPerItem

// runEngineNoop runs 1M no-op items through RunJob and returns its time.
func runEngineNoop(b *testing.B, shards []Shard, pipelined bool) time.Duration {
	j, c := newBenchJob(), &benchCounter{}
	start := time.Now()
	res := RunJob(context.Background(), j, shards, PipelineConfig{
		Threads: benchThreads, Streaming: true, PipelinedFetch: pipelined, Counter: c,
	})
	d := time.Since(start)
	if res.Success != benchTotal || c.s.Load() != benchTotal {
		b.Fatalf("engine processed %d (counter %d), want %d", res.Success, c.s.Load(), benchTotal)
	}
	return d
}

// runPoolNoop runs the same 1M no-op items through poolBaseline.
func runPoolNoop(b *testing.B, shards []Shard, ahead bool) time.Duration {
	j, c := newBenchJob(), &benchCounter{}
	start := time.Now()
	if err := poolBaseline(context.Background(), j, shards, benchThreads, ahead, c); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if c.s.Load() != benchTotal {
		b.Fatalf("baseline processed %d, want %d", c.s.Load(), benchTotal)
	}
	return d
}

// BenchmarkEngine runs 1M no-op items through RunJob (allocations and
// profiles; the ratio to the baseline comes from BenchmarkEngineVsPool).
func BenchmarkEngine(b *testing.B) {
	shards := shardsFor(benchItems, benchFetch)
	b.ReportAllocs()
	for b.Loop() {
		runEngineNoop(b, shards, false)
	}
	b.ReportMetric(float64(benchTotal)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkPoolBaseline runs the same 1M no-op items through poolBaseline.
func BenchmarkPoolBaseline(b *testing.B) {
	shards := shardsFor(benchItems, benchFetch)
	b.ReportAllocs()
	for b.Loop() {
		runPoolNoop(b, shards, false)
	}
	b.ReportMetric(float64(benchTotal)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkEngineVsPool runs, in every iteration and in rotating order,
// the engine and poolBaseline on the same 1M no-op items, both with the
// default semantics (fetch after the batch) and both fetching ahead
// (PipelinedFetch), so that a shared machine's load swings hit all four
// alike. It reports each one's items/s and the engine's ratios to the
// baseline of the same semantics over the whole benchmark (>= 1 means the
// engine is at least as fast).
func BenchmarkEngineVsPool(b *testing.B) {
	shards := shardsFor(benchItems, benchFetch)
	var eng, pip, pool, poolAhead time.Duration
	i := 0
	for b.Loop() {
		for k := range 4 {
			switch (i + k) % 4 {
			case 0:
				eng += runEngineNoop(b, shards, false)
			case 1:
				pip += runEngineNoop(b, shards, true)
			case 2:
				pool += runPoolNoop(b, shards, false)
			case 3:
				poolAhead += runPoolNoop(b, shards, true)
			}
		}
		i++
	}
	n := float64(benchTotal) * float64(b.N)
	b.ReportMetric(n/eng.Seconds(), "engine-items/s")
	b.ReportMetric(n/pool.Seconds(), "pool-items/s")
	b.ReportMetric(n/pip.Seconds(), "engine-pipelined-items/s")
	b.ReportMetric(n/poolAhead.Seconds(), "pool-ahead-items/s")
	b.ReportMetric(pool.Seconds()/eng.Seconds(), "engine/pool")
	b.ReportMetric(poolAhead.Seconds()/pip.Seconds(), "pipelined/pool-ahead")
}

// poolBaseline is the hand-written loop the engine is measured against,
// written as one would by hand for speed: per shard item one fetching
// goroutine and a fixed pool of threads workers, started once per run,
// pulling work from a channel. Each fetched batch is cut into one
// contiguous chunk per worker (the fewest channel operations); workers
// count locally and add to c once at the end. With ahead false the fetcher
// waits for a batch's chunks before fetching again (the engine's default
// semantics); with ahead true it fetches the next batch at once, up to one
// batch ahead (the channel's capacity), as PipelinedFetch does. It has no
// panic recovery, no per-item cancellation check and no error bookkeeping.
func poolBaseline(ctx context.Context, job Job[int], shards []Shard, threads int, ahead bool, c Counter) error {
	type chunk struct {
		items []int
		done  *sync.WaitGroup
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range shards {
		g.Go(func() error {
			work := make(chan chunk, threads)
			var wg sync.WaitGroup
			for range threads {
				wg.Go(func() {
					var ok, bad int64
					for ch := range work {
						for _, it := range ch.items {
							if job.Process(ctx, s, it) != nil {
								bad++
							} else {
								ok++
							}
						}
						if ch.done != nil {
							ch.done.Done()
						}
					}
					c.Add(ok, bad)
				})
			}
			defer wg.Wait()
			defer close(work)
			var batch sync.WaitGroup
			for {
				items, err := job.Fetch(ctx, s)
				if err != nil {
					return err
				}
				if len(items) == 0 {
					return nil
				}
				k := min(threads, len(items))
				var done *sync.WaitGroup
				if !ahead {
					done = &batch
					batch.Add(k)
				}
				for i := range k {
					select {
					case work <- chunk{items[i*len(items)/k : (i+1)*len(items)/k], done}:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if !ahead {
					batch.Wait()
				}
			}
		})
	}
	return g.Wait()
}

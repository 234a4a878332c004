package dataflow

import (
	"context"
	"slices"
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

// benchContext is the context both sides run under: cancellable, as the
// Node's runs always are (context.Background has no Done channel, which
// makes the engine's cancellation checks cheaper than they are in use).
func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

// runEngineNoop runs 1M no-op items through runJob and returns its time.
func runEngineNoop(b *testing.B, ctx context.Context, shards []Shard, pipelined bool) time.Duration {
	j, c := newBenchJob(), &benchCounter{}
	start := time.Now()
	res := runJob(ctx, j, shards, pipelineConfig{
		Threads: benchThreads, Streaming: true, PipelinedFetch: pipelined, Counter: c,
	})
	d := time.Since(start)
	if res.Success != benchTotal || c.s.Load() != benchTotal {
		b.Fatalf("engine processed %d (counter %d), want %d", res.Success, c.s.Load(), benchTotal)
	}
	return d
}

// runPoolNoop runs the same 1M no-op items through poolBaseline.
func runPoolNoop(b *testing.B, ctx context.Context, shards []Shard, ahead bool) time.Duration {
	j, c := newBenchJob(), &benchCounter{}
	start := time.Now()
	if err := poolBaseline(ctx, j, shards, benchThreads, ahead, c); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if c.s.Load() != benchTotal {
		b.Fatalf("baseline processed %d, want %d", c.s.Load(), benchTotal)
	}
	return d
}

// BenchmarkEngine runs 1M no-op items through runJob (allocations and
// profiles; the ratio to the baseline comes from BenchmarkEngineVsPool).
func BenchmarkEngine(b *testing.B) {
	shards, ctx := shardsFor(benchItems, benchFetch), benchContext(b)
	b.ReportAllocs()
	for b.Loop() {
		runEngineNoop(b, ctx, shards, false)
	}
	b.ReportMetric(float64(benchTotal)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkPoolBaseline runs the same 1M no-op items through poolBaseline.
func BenchmarkPoolBaseline(b *testing.B) {
	shards, ctx := shardsFor(benchItems, benchFetch), benchContext(b)
	b.ReportAllocs()
	for b.Loop() {
		runPoolNoop(b, ctx, shards, false)
	}
	b.ReportMetric(float64(benchTotal)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkEngineVsPool runs, in every iteration and in rotating order,
// the engine and poolBaseline on the same 1M no-op items, both with the
// default semantics (fetch after the batch) and both fetching ahead
// (PipelinedFetch), so that a shared machine's load swings hit all four
// alike. It reports each one's items/s and the engine's ratios to the
// baseline of the same semantics (>= 1 means the engine is at least as
// fast) three ways: over the whole benchmark's wall time ("engine/pool",
// "pipelined/pool-ahead"); as the median of the iterations' ratios
// ("-p50": the four runs of an iteration are adjacent in time, so the
// median drops the runs a loaded machine descheduled longest, which swing
// the sums by tens of percent); and, where the process's CPU time can be
// read, in CPU time ("-cpu": which side costs more per item, whatever the
// load).
func BenchmarkEngineVsPool(b *testing.B) {
	shards, ctx := shardsFor(benchItems, benchFetch), benchContext(b)
	// Per mode (engine, pipelined, pool, pool ahead): each iteration's
	// wall time, and the summed process CPU time.
	var wall [4][]time.Duration
	var cpu [4]time.Duration
	i := 0
	for b.Loop() {
		for k := range 4 {
			m := (i + k) % 4
			c0 := processCPU()
			var d time.Duration
			switch m {
			case 0:
				d = runEngineNoop(b, ctx, shards, false)
			case 1:
				d = runEngineNoop(b, ctx, shards, true)
			case 2:
				d = runPoolNoop(b, ctx, shards, false)
			case 3:
				d = runPoolNoop(b, ctx, shards, true)
			}
			cpu[m] += processCPU() - c0
			wall[m] = append(wall[m], d)
		}
		i++
	}
	var sum [4]time.Duration
	for m := range wall {
		for _, d := range wall[m] {
			sum[m] += d
		}
	}
	eng, pip, pool, poolAhead := sum[0], sum[1], sum[2], sum[3]
	n := float64(benchTotal) * float64(b.N)
	b.ReportMetric(n/eng.Seconds(), "engine-items/s")
	b.ReportMetric(n/pool.Seconds(), "pool-items/s")
	b.ReportMetric(n/pip.Seconds(), "engine-pipelined-items/s")
	b.ReportMetric(n/poolAhead.Seconds(), "pool-ahead-items/s")
	b.ReportMetric(pool.Seconds()/eng.Seconds(), "engine/pool")
	b.ReportMetric(poolAhead.Seconds()/pip.Seconds(), "pipelined/pool-ahead")
	b.ReportMetric(medianRatio(wall[2], wall[0]), "engine/pool-p50")
	b.ReportMetric(medianRatio(wall[3], wall[1]), "pipelined/pool-ahead-p50")
	if cpu[0] > 0 && cpu[1] > 0 {
		b.ReportMetric(cpu[2].Seconds()/cpu[0].Seconds(), "engine/pool-cpu")
		b.ReportMetric(cpu[3].Seconds()/cpu[1].Seconds(), "pipelined/pool-ahead-cpu")
	}
}

// medianRatio is the median over i of num[i]/den[i].
func medianRatio(num, den []time.Duration) float64 {
	r := make([]float64, len(num))
	for i := range num {
		r[i] = num[i].Seconds() / den[i].Seconds()
	}
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
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
func poolBaseline(ctx context.Context, job Job[int], shards []Shard, threads int, ahead bool, c outcomeCounter) error {
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

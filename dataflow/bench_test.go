package dataflow

import (
	"context"
	"sync/atomic"
	"testing"

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

// BenchmarkEngine runs 1M no-op items through RunJob.
func BenchmarkEngine(b *testing.B) {
	shards := shardsFor(benchItems, benchFetch)
	const total = benchTotal
	{
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			j, c := newBenchJob(), &benchCounter{}
			b.StartTimer()
			res := RunJob(context.Background(), j, shards, PipelineConfig{
				Threads: benchThreads, Streaming: true, Counter: c,
			})
			if res.Success != total || c.s.Load() != total {
				b.Fatalf("processed %d (counter %d), want %d", res.Success, c.s.Load(), total)
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
	}
}

// BenchmarkErrgroupBaseline runs the same 1M no-op items through
// errgroupBaseline, at the same concurrency and fetch size.
func BenchmarkErrgroupBaseline(b *testing.B) {
	shards := shardsFor(benchItems, benchFetch)
	const total = benchTotal
	{
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			j, c := newBenchJob(), &benchCounter{}
			b.StartTimer()
			if err := errgroupBaseline(context.Background(), j, shards, c); err != nil {
				b.Fatal(err)
			}
			if c.s.Load() != total {
				b.Fatalf("processed %d, want %d", c.s.Load(), total)
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
	}
}

// errgroupBaseline is the hand-written loop the engine is measured
// against: one goroutine per shard item fetching in a loop, each batch split
// into benchThreads contiguous chunks run by an errgroup, counts added once
// per chunk. It has no panic recovery, no cancellation checks per item and
// no error bookkeeping.
func errgroupBaseline(ctx context.Context, job Job[int], shards []Shard, c Counter) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range shards {
		g.Go(func() error {
			for {
				items, err := job.Fetch(ctx, s)
				if err != nil {
					return err
				}
				if len(items) == 0 {
					return nil
				}
				var inner errgroup.Group
				k := min(benchThreads, len(items))
				for i := range k {
					chunk := items[i*len(items)/k : (i+1)*len(items)/k]
					inner.Go(func() error {
						var ok, bad int64
						for _, it := range chunk {
							if job.Process(ctx, s, it) != nil {
								bad++
							} else {
								ok++
							}
						}
						c.Add(ok, bad)
						return nil
					})
				}
				if err := inner.Wait(); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

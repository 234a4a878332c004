package dataflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memJob is a Job[int] and BatchJob[int] over per-item queues: Fetch pops up
// to FetchCount values of the shard item's queue.
type memJob struct {
	mu      sync.Mutex
	queues  map[int][]int
	fetches atomic.Int64

	fetchHook func(ctx context.Context, s Shard) error
	process   func(ctx context.Context, s Shard, v int) error
	batch     func(ctx context.Context, s Shard, vs []int) (int, error)

	processedMu sync.Mutex
	processed   map[int][]int // item -> values processed (successfully or not)
}

func newMemJob(items, perItem int) *memJob {
	j := &memJob{queues: map[int][]int{}, processed: map[int][]int{}}
	for it := range items {
		for v := range perItem {
			j.queues[it] = append(j.queues[it], it*1_000_000+v)
		}
	}
	return j
}

func (j *memJob) Fetch(ctx context.Context, s Shard) ([]int, error) {
	j.fetches.Add(1)
	if j.fetchHook != nil {
		if err := j.fetchHook(ctx, s); err != nil {
			return nil, err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	q := j.queues[s.Item]
	n := min(len(q), s.FetchCount)
	out := slices.Clone(q[:n])
	j.queues[s.Item] = q[n:]
	return out, nil
}

func (j *memJob) record(s Shard, vs ...int) {
	j.processedMu.Lock()
	j.processed[s.Item] = append(j.processed[s.Item], vs...)
	j.processedMu.Unlock()
}

// checkProcessed fails t unless every value was processed at most once and
// by its own item; it returns the number of values each item processed.
func (j *memJob) checkProcessed(t *testing.T) map[int]int {
	t.Helper()
	j.processedMu.Lock()
	defer j.processedMu.Unlock()
	counts := map[int]int{}
	for it, vs := range j.processed {
		seen := map[int]bool{}
		for _, v := range vs {
			if seen[v] || v/1_000_000 != it {
				t.Fatalf("item %d: value %d processed twice or by the wrong item", it, v)
			}
			seen[v] = true
		}
		counts[it] = len(seen)
	}
	return counts
}

func (j *memJob) Process(ctx context.Context, s Shard, v int) error {
	j.record(s, v)
	if j.process != nil {
		return j.process(ctx, s, v)
	}
	return nil
}

func (j *memJob) ProcessBatch(ctx context.Context, s Shard, vs []int) (int, error) {
	j.record(s, vs...)
	if j.batch != nil {
		return j.batch(ctx, s, vs)
	}
	return len(vs), nil
}

func shardsFor(items, fetch int) []Shard {
	out := make([]Shard, items)
	for i := range out {
		out[i] = Shard{JobName: "j", Item: i, Total: items, FetchCount: fetch}
	}
	return out
}

type sumCounter struct{ s, f atomic.Int64 }

func (c *sumCounter) Add(s, f int64) { c.s.Add(s); c.f.Add(f) }

var errBoom = errors.New("boom")

func TestRunJobCounting(t *testing.T) {
	tests := []struct {
		name         string
		items, per   int
		fetch        int
		threads      int
		streaming    bool
		failEvery    int
		wantSuccess  int64
		wantFailure  int64
		wantFetchMin int64
	}{
		{name: "one fetch, all succeed", items: 2, per: 10, fetch: 100, threads: 3, wantSuccess: 20},
		{name: "one fetch limited by FetchCount", items: 2, per: 10, fetch: 4, threads: 3, wantSuccess: 8},
		{name: "streaming drains every item", items: 3, per: 50, fetch: 7, threads: 4, streaming: true, wantSuccess: 150},
		{name: "errors count failures and go on", items: 2, per: 100, fetch: 1000, threads: 8, failEvery: 10, wantSuccess: 180, wantFailure: 20},
		{name: "one thread inline", items: 1, per: 10, fetch: 3, threads: 1, streaming: true, failEvery: 2, wantSuccess: 5, wantFailure: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newMemJob(tt.items, tt.per)
			if tt.failEvery > 0 {
				j.process = func(_ context.Context, _ Shard, v int) error {
					if v%tt.failEvery == 0 {
						return fmt.Errorf("value %d: %w", v, errBoom)
					}
					return nil
				}
			}
			var c sumCounter
			res := runJob(t.Context(), j, shardsFor(tt.items, tt.fetch), pipelineConfig{
				JobName: "j", Threads: tt.threads, Streaming: tt.streaming, Counter: &c, ErrorPolicy: ErrorPolicyReturn,
			})
			if res.Success != tt.wantSuccess || res.Failure != tt.wantFailure {
				t.Fatalf("counts = %d/%d, want %d/%d", res.Success, res.Failure, tt.wantSuccess, tt.wantFailure)
			}
			if c.s.Load() != res.Success || c.f.Load() != res.Failure {
				t.Fatalf("counter = %d/%d, result = %d/%d", c.s.Load(), c.f.Load(), res.Success, res.Failure)
			}
			if tt.wantFailure > 0 {
				if !errors.Is(res.Err, errBoom) {
					t.Fatalf("Err = %v, want errBoom", res.Err)
				}
				var ie *ItemError
				if !errors.As(res.Err, &ie) || ie.Op != "process" || ie.Job != "j" {
					t.Fatalf("Err = %#v, want an *ItemError for process", res.Err)
				}
			} else if res.Err != nil {
				t.Fatalf("Err = %v, want nil", res.Err)
			}
			j.checkProcessed(t)
		})
	}
}

func TestRunBatchJobSlicesAndCounting(t *testing.T) {
	tests := []struct {
		n, threads int
	}{{10, 3}, {1000, 8}, {7, 8}, {1, 4}, {9, 9}, {100, 7}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d threads=%d", tt.n, tt.threads), func(t *testing.T) {
			j := newMemJob(1, tt.n)
			var mu sync.Mutex
			var slicesSeen [][]int
			j.batch = func(_ context.Context, _ Shard, vs []int) (int, error) {
				mu.Lock()
				slicesSeen = append(slicesSeen, slices.Clone(vs))
				mu.Unlock()
				return len(vs) - 1, nil // one failure per slice
			}
			res := runBatchJob(t.Context(), j, shardsFor(1, tt.n), pipelineConfig{Threads: tt.threads})
			want := min(tt.n, tt.threads)
			if len(slicesSeen) != want {
				t.Fatalf("%d slices, want %d", len(slicesSeen), want)
			}
			slices.SortFunc(slicesSeen, func(a, b []int) int { return a[0] - b[0] })
			next, minLen, maxLen := 0, tt.n, 0
			for _, s := range slicesSeen {
				for _, v := range s {
					if v != next {
						t.Fatalf("slices not contiguous: got %d, want %d", v, next)
					}
					next++
				}
				minLen, maxLen = min(minLen, len(s)), max(maxLen, len(s))
			}
			if next != tt.n || maxLen-minLen > 1 {
				t.Fatalf("covered %d of %d, slice lengths %d..%d", next, tt.n, minLen, maxLen)
			}
			if res.Success != int64(tt.n-want) || res.Failure != int64(want) {
				t.Fatalf("counts = %d/%d, want %d/%d", res.Success, res.Failure, tt.n-want, want)
			}
		})
	}
}

// slicingJob is a memJob that cuts its batches itself (BatchSlicer).
type slicingJob struct {
	*memJob
	ends    []int
	threads atomic.Int64 // the Shard.Threads Fetch saw
}

func (j *slicingJob) Fetch(ctx context.Context, s Shard) ([]int, error) {
	j.threads.Store(int64(s.Threads))
	return j.memJob.Fetch(ctx, s)
}

func (j *slicingJob) Slices(_ Shard, items []int) []int { return j.ends }

// TestRunBatchJobCutsWhereTheJobSays: a BatchSlicer's batch is cut at the
// ends it returns; ends that are not an ascending cut of the batch into at
// most Threads slices leave the engine's near-equal cut. Fetch sees
// Shard.Threads.
func TestRunBatchJobCutsWhereTheJobSays(t *testing.T) {
	for _, tt := range []struct {
		name string
		ends []int
		want []int // slice lengths, in order
	}{
		{"the job's cut", []int{1, 5, 10}, []int{1, 4, 5}},
		{"one slice", []int{10}, []int{10}},
		{"more slices than threads", []int{1, 2, 3, 4, 10}, []int{2, 3, 2, 3}},
		{"not the batch's end", []int{3, 9}, []int{2, 3, 2, 3}},
		{"not ascending", []int{5, 5, 10}, []int{2, 3, 2, 3}},
		{"nil", nil, []int{2, 3, 2, 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := &slicingJob{memJob: newMemJob(1, 10), ends: tt.ends}
			var mu sync.Mutex
			var seen [][]int
			j.batch = func(_ context.Context, _ Shard, vs []int) (int, error) {
				mu.Lock()
				seen = append(seen, slices.Clone(vs))
				mu.Unlock()
				return len(vs), nil
			}
			res := runBatchJob(t.Context(), j, shardsFor(1, 10), pipelineConfig{Threads: 4})
			slices.SortFunc(seen, func(a, b []int) int { return a[0] - b[0] })
			var lens []int
			next := 0
			for _, s := range seen {
				for _, v := range s {
					if v != next {
						t.Fatalf("slices not contiguous: got %d, want %d", v, next)
					}
					next++
				}
				lens = append(lens, len(s))
			}
			if !slices.Equal(lens, tt.want) || res.Success != 10 {
				t.Fatalf("slice lengths %v, %d successes; want %v, 10", lens, res.Success, tt.want)
			}
			if n := j.threads.Load(); n != 4 {
				t.Fatalf("Fetch saw Shard.Threads %d; want 4", n)
			}
		})
	}
}

func TestRunBatchJobErrorsFailWholeSlice(t *testing.T) {
	tests := []struct {
		name        string
		batch       func(vs []int) (int, error)
		wantSuccess int64
		wantFailure int64
		wantErr     error
	}{
		{"error fails the slice whatever succeeded says", func(vs []int) (int, error) {
			if vs[0] == 0 {
				return len(vs), errBoom
			}
			return len(vs), nil
		}, 5, 5, errBoom},
		{"panic fails the slice", func(vs []int) (int, error) {
			if vs[0] == 0 {
				panic("kaput")
			}
			return len(vs), nil
		}, 5, 5, ErrPanic},
		{"succeeded above len is clamped", func(vs []int) (int, error) { return len(vs) + 3, nil }, 10, 0, ErrBadSucceeded},
		{"negative succeeded is clamped", func(vs []int) (int, error) { return -1, nil }, 0, 10, ErrBadSucceeded},
		{"skipped items count neither", func(vs []int) (int, error) { return len(vs) - 2, &Skipped{N: 2} }, 6, 0, nil},
		{"skipped, succeeded and failed", func(vs []int) (int, error) { return 1, &Skipped{N: 2} }, 2, 4, nil},
		{"skipped above len-succeeded is clamped", func(vs []int) (int, error) { return len(vs) - 1, &Skipped{N: 3} }, 8, 0, ErrBadSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newMemJob(1, 10)
			j.batch = func(_ context.Context, _ Shard, vs []int) (int, error) { return tt.batch(vs) }
			res := runBatchJob(t.Context(), j, shardsFor(1, 10), pipelineConfig{Threads: 2, ErrorPolicy: ErrorPolicyReturn})
			if res.Success != tt.wantSuccess || res.Failure != tt.wantFailure {
				t.Fatalf("counts = %d/%d, want %d/%d", res.Success, res.Failure, tt.wantSuccess, tt.wantFailure)
			}
			if !errors.Is(res.Err, tt.wantErr) {
				t.Fatalf("Err = %v, want %v", res.Err, tt.wantErr)
			}
		})
	}
}

func TestRunJobPanics(t *testing.T) {
	t.Run("process panic is one failure, the rest go on", func(t *testing.T) {
		j := newMemJob(1, 20)
		j.process = func(_ context.Context, _ Shard, v int) error {
			if v == 3 {
				panic(fmt.Sprintf("bad value %d", v))
			}
			return nil
		}
		res := runJob(t.Context(), j, shardsFor(1, 20), pipelineConfig{Threads: 4, ErrorPolicy: ErrorPolicyReturn})
		if res.Success != 19 || res.Failure != 1 {
			t.Fatalf("counts = %d/%d, want 19/1", res.Success, res.Failure)
		}
		var pe *PanicError
		if !errors.As(res.Err, &pe) || pe.Op != "process" || pe.Value != "bad value 3" || !bytes.Contains(pe.Stack, []byte("engine_test.go")) {
			t.Fatalf("Err = %v, want a *PanicError with the stack", res.Err)
		}
	})
	t.Run("fetch panic ends the item and counts one failure", func(t *testing.T) {
		j := newMemJob(2, 5)
		j.fetchHook = func(_ context.Context, s Shard) error {
			if s.Item == 1 {
				panic("fetch kaput")
			}
			return nil
		}
		res := runJob(t.Context(), j, shardsFor(2, 5), pipelineConfig{Threads: 2, Streaming: true, ErrorPolicy: ErrorPolicyReturn})
		if res.Success != 5 || res.Failure != 1 {
			t.Fatalf("counts = %d/%d, want 5/1", res.Success, res.Failure)
		}
		var ie *ItemError
		if !errors.As(res.Err, &ie) || ie.Item != 1 || ie.Op != "fetch" || !errors.Is(ie, ErrPanic) {
			t.Fatalf("Err = %v, want item 1's fetch panic", res.Err)
		}
	})
	t.Run("fetch error ends the item only", func(t *testing.T) {
		j := newMemJob(2, 5)
		j.fetchHook = func(_ context.Context, s Shard) error {
			if s.Item == 0 {
				return errBoom
			}
			return nil
		}
		res := runJob(t.Context(), j, shardsFor(2, 5), pipelineConfig{Threads: 2, ErrorPolicy: ErrorPolicyReturn})
		if res.Success != 5 || res.Failure != 0 || !errors.Is(res.Err, errBoom) {
			t.Fatalf("counts = %d/%d err %v, want 5/0 and errBoom", res.Success, res.Failure, res.Err)
		}
	})
}

func TestRunJobErrorPolicies(t *testing.T) {
	tests := []struct {
		policy     ErrorPolicy
		wantErr    bool
		wantLogged bool
	}{
		{"", false, true}, // default: log
		{ErrorPolicyLog, false, true},
		{ErrorPolicyReturn, true, false},
		{ErrorPolicyIgnore, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			var buf bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
			j := newMemJob(2, 4)
			j.process = func(_ context.Context, _ Shard, v int) error {
				if v%4 == 1 {
					panic("p")
				}
				return errBoom
			}
			res := runJob(t.Context(), j, shardsFor(2, 4), pipelineConfig{JobName: "pol", Threads: 2, ErrorPolicy: tt.policy, Logger: logger})
			if res.Failure != 8 {
				t.Fatalf("failures = %d, want 8 under every policy", res.Failure)
			}
			if (res.Err != nil) != tt.wantErr {
				t.Fatalf("Err = %v, want error: %v", res.Err, tt.wantErr)
			}
			mu.Lock()
			logged := buf.String()
			mu.Unlock()
			if got := strings.Count(logged, "shard item failed"); (got == 2) != tt.wantLogged || (!tt.wantLogged && got != 0) {
				t.Fatalf("logged %d records, want logged: %v\n%s", got, tt.wantLogged, logged)
			}
			if tt.wantErr {
				var ie *ItemError
				if !errors.As(res.Err, &ie) {
					t.Fatalf("Err %v is not an *ItemError", res.Err)
				}
			}
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRunJobStreamingStops(t *testing.T) {
	t.Run("empty fetch ends streaming", func(t *testing.T) {
		j := newMemJob(1, 10)
		res := runJob(t.Context(), j, shardsFor(1, 3), pipelineConfig{Threads: 2, Streaming: true})
		// 4 fetches with data (3+3+3+1) and one empty.
		if res.Success != 10 || j.fetches.Load() != 5 {
			t.Fatalf("success %d fetches %d, want 10 and 5", res.Success, j.fetches.Load())
		}
	})
	t.Run("non-streaming fetches once", func(t *testing.T) {
		j := newMemJob(1, 10)
		res := runJob(t.Context(), j, shardsFor(1, 3), pipelineConfig{Threads: 2})
		if res.Success != 3 || j.fetches.Load() != 1 {
			t.Fatalf("success %d fetches %d, want 3 and 1", res.Success, j.fetches.Load())
		}
	})
	t.Run("keepGoing false stops after the pass", func(t *testing.T) {
		j := newMemJob(1, 100)
		var checks atomic.Int64
		keep := func() bool { return checks.Add(1) < 3 }
		res := runJob(t.Context(), j, shardsFor(1, 5), pipelineConfig{Threads: 2, Streaming: true, KeepGoing: keep})
		if res.Success != 15 || j.fetches.Load() != 3 {
			t.Fatalf("success %d fetches %d, want 15 and 3", res.Success, j.fetches.Load())
		}
	})
	t.Run("ctx cancelled stops fetching and handing out", func(t *testing.T) {
		j := newMemJob(1, 1_000_000)
		ctx, cancel := context.WithCancel(t.Context())
		var n, atCancel atomic.Int64
		j.process = func(context.Context, Shard, int) error {
			if n.Add(1) == 2500 {
				cancel()
				atCancel.Store(n.Load())
			}
			return nil
		}
		done := make(chan RunResult)
		go func() { done <- runJob(ctx, j, shardsFor(1, 1000), pipelineConfig{Threads: 4, Streaming: true}) }()
		select {
		case res := <-done:
			// Workers check ctx.Err every ctxPollEvery items: once cancel
			// has returned, each of the 4 workers starts at most
			// ctxPollEvery more items.
			if limit := atCancel.Load() + 4*ctxPollEvery; res.Success < 2500 || res.Success > limit {
				t.Fatalf("success %d after cancel at 2500, want 2500..%d", res.Success, limit)
			}
			if f := j.fetches.Load(); f != 3 {
				t.Fatalf("fetches %d, want 3", f)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("runJob did not return after cancel")
		}
	})
}

func TestRunJobSlowItemDoesNotDelayOthers(t *testing.T) {
	j := newMemJob(3, 10)
	release := make(chan struct{})
	var fastDone sync.WaitGroup
	fastDone.Add(20)
	j.process = func(ctx context.Context, s Shard, _ int) error {
		if s.Item == 0 {
			<-release
			return nil
		}
		fastDone.Done()
		return nil
	}
	done := make(chan RunResult)
	go func() { done <- runJob(t.Context(), j, shardsFor(3, 10), pipelineConfig{Threads: 1}) }()
	fastDone.Wait() // items 1 and 2 finish while item 0 is blocked
	select {
	case <-done:
		t.Fatal("run ended while item 0 was still blocked")
	default:
	}
	close(release)
	if res := <-done; res.Success != 30 {
		t.Fatalf("success %d, want 30", res.Success)
	}
}

func TestRunJobSlowProcessDoesNotBlockOtherWorkers(t *testing.T) {
	// One stuck Process holds back at most the rest of its stride
	// (400 items / (4 x 4 workers) = 25): the other workers finish the
	// remaining 375 items of the batch while it is stuck.
	j := newMemJob(1, 400)
	release := make(chan struct{})
	var others sync.WaitGroup
	others.Add(375)
	j.process = func(_ context.Context, _ Shard, v int) error {
		if v == 0 {
			<-release
			return nil
		}
		if v >= 25 {
			others.Done()
		}
		return nil
	}
	done := make(chan RunResult)
	go func() { done <- runJob(t.Context(), j, shardsFor(1, 400), pipelineConfig{Threads: 4}) }()
	others.Wait()
	close(release)
	if res := <-done; res.Success != 400 {
		t.Fatalf("success %d, want 400", res.Success)
	}
}

func TestRunJobNoShards(t *testing.T) {
	res := runJob(t.Context(), newMemJob(0, 0), nil, pipelineConfig{})
	if res.Success != 0 || res.Failure != 0 || res.Err != nil {
		t.Fatalf("empty run = %+v", res)
	}
}

package dataflow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipelined is the pipelineConfig of the pipelined-fetch tests.
func pipelined(threads int) pipelineConfig {
	return pipelineConfig{JobName: "j", Threads: threads, Streaming: true, PipelinedFetch: true, ErrorPolicy: ErrorPolicyReturn}
}

func TestPipelinedFetchOverlapsProcessing(t *testing.T) {
	// The first batch's Process waits until the second Fetch has begun:
	// with the fetches in sequence after processing this would never end.
	for _, threads := range []int{1, 4} {
		j := newMemJob(1, 30)
		secondFetch := make(chan struct{})
		var once sync.Once
		j.fetchHook = func(context.Context, Shard) error {
			if j.fetches.Load() == 2 {
				once.Do(func() { close(secondFetch) })
			}
			return nil
		}
		j.process = func(_ context.Context, _ Shard, v int) error {
			if v < 10 { // the first batch
				select {
				case <-secondFetch:
				case <-time.After(10 * time.Second):
					return errors.New("the second Fetch did not start while the first batch was processed")
				}
			}
			return nil
		}
		res := runJob(t.Context(), j, shardsFor(1, 10), pipelined(threads))
		if res.Err != nil || res.Success != 30 || j.fetches.Load() != 4 {
			t.Fatalf("threads %d: success %d, fetches %d, err %v; want 30, 4 (3 batches and an empty one), nil",
				threads, res.Success, j.fetches.Load(), res.Err)
		}
	}
}

func TestPipelinedFetchCountsLikeSequential(t *testing.T) {
	tests := []struct {
		name                     string
		items, per, fetch, thr   int
		failEvery                int
		wantSuccess, wantFailure int64
	}{
		{name: "drains every item", items: 3, per: 50, fetch: 7, thr: 4, wantSuccess: 150},
		{name: "one thread", items: 1, per: 10, fetch: 3, thr: 1, failEvery: 2, wantSuccess: 5, wantFailure: 5},
		{name: "errors count and go on", items: 2, per: 1000, fetch: 100, thr: 8, failEvery: 10, wantSuccess: 1800, wantFailure: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newMemJob(tt.items, tt.per)
			if tt.failEvery > 0 {
				j.process = func(_ context.Context, _ Shard, v int) error {
					if v%tt.failEvery == 0 {
						return errBoom
					}
					return nil
				}
			}
			var c sumCounter
			cfg := pipelined(tt.thr)
			cfg.Counter = &c
			res := runJob(t.Context(), j, shardsFor(tt.items, tt.fetch), cfg)
			if res.Success != tt.wantSuccess || res.Failure != tt.wantFailure {
				t.Fatalf("counts = %d/%d, want %d/%d", res.Success, res.Failure, tt.wantSuccess, tt.wantFailure)
			}
			if c.s.Load() != res.Success || c.f.Load() != res.Failure {
				t.Fatalf("counter = %d/%d, result = %d/%d", c.s.Load(), c.f.Load(), res.Success, res.Failure)
			}
			for it, n := range j.checkProcessed(t) {
				if n != tt.per {
					t.Fatalf("item %d: %d distinct values processed, want %d", it, n, tt.per)
				}
			}
		})
	}
}

func TestPipelinedFetchBatchJob(t *testing.T) {
	j := newMemJob(2, 95)
	var c sumCounter
	cfg := pipelined(3)
	cfg.Counter = &c
	res := runBatchJob(t.Context(), j, shardsFor(2, 10), cfg)
	if res.Success != 190 || res.Failure != 0 || c.s.Load() != 190 {
		t.Fatalf("counts = %d/%d (counter %d), want 190/0", res.Success, res.Failure, c.s.Load())
	}
}

func TestPipelinedFetchKeepGoingStopsFetching(t *testing.T) {
	// KeepGoing is asked before every Fetch after the first; a batch
	// fetched is processed. Two yeses: 3 fetches, 15 items.
	j := newMemJob(1, 100)
	var checks atomic.Int64
	cfg := pipelined(2)
	cfg.KeepGoing = func() bool { return checks.Add(1) < 3 }
	res := runJob(t.Context(), j, shardsFor(1, 5), cfg)
	if res.Success != 15 || j.fetches.Load() != 3 {
		t.Fatalf("success %d fetches %d, want 15 and 3", res.Success, j.fetches.Load())
	}
}

func TestPipelinedFetchErrorAfterBatches(t *testing.T) {
	// The third Fetch fails: the two batches fetched before are processed,
	// the error is the item's, and nothing is fetched after it.
	j := newMemJob(1, 100)
	j.fetchHook = func(context.Context, Shard) error {
		if j.fetches.Load() == 3 {
			return errBoom
		}
		return nil
	}
	res := runJob(t.Context(), j, shardsFor(1, 10), pipelined(4))
	var ie *ItemError
	if res.Success != 20 || j.fetches.Load() != 3 || !errors.As(res.Err, &ie) || ie.Op != "fetch" || !errors.Is(res.Err, errBoom) {
		t.Fatalf("success %d, fetches %d, err %v; want 20, 3, a fetch ItemError wrapping errBoom", res.Success, j.fetches.Load(), res.Err)
	}
}

func TestPipelinedFetchCancel(t *testing.T) {
	j := newMemJob(1, 1_000_000)
	ctx, cancel := context.WithCancel(t.Context())
	var n atomic.Int64
	j.process = func(context.Context, Shard, int) error {
		if n.Add(1) == 2500 {
			cancel()
		}
		return nil
	}
	done := make(chan RunResult)
	go func() { done <- runJob(ctx, j, shardsFor(1, 1000), pipelined(4)) }()
	select {
	case res := <-done:
		// The cancel comes in the third batch; at most one batch more was
		// fetched (ahead) and none after the cancel was seen.
		if res.Success < 2500 || res.Success > 4000 || j.fetches.Load() > 4 {
			t.Fatalf("success %d, fetches %d after a cancel at item 2500; want 2500..4000 and at most 4", res.Success, j.fetches.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runJob did not return after cancel")
	}
}

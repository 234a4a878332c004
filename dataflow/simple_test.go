package dataflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// TestRunSimpleJobOncePerItem: one call per shard, success and failure
// counted per call, errors kept per item.
func TestRunSimpleJobOncePerItem(t *testing.T) {
	var mu sync.Mutex
	calls := map[int]int{}
	fn := func(_ context.Context, s Shard) error {
		mu.Lock()
		calls[s.Item]++
		mu.Unlock()
		if s.Item == 2 {
			return errBoom
		}
		return nil
	}
	c := &sumCounter{}
	res := runSimpleJob(t.Context(), fn, shardsFor(4, 10), pipelineConfig{JobName: "s", Threads: 4, Streaming: true, Counter: c, ErrorPolicy: ErrorPolicyReturn})
	if res.Success != 3 || res.Failure != 1 || c.s.Load() != 3 || c.f.Load() != 1 {
		t.Fatalf("result %+v counter %d/%d, want 3 successes and 1 failure", res, c.s.Load(), c.f.Load())
	}
	if want := map[int]int{0: 1, 1: 1, 2: 1, 3: 1}; !mapsEqual(calls, want) {
		t.Fatalf("calls per item = %v, want one each (streaming must not loop)", calls)
	}
	var ie *ItemError
	if !errors.As(res.Err, &ie) || ie.Item != 2 || !errors.Is(res.Err, errBoom) {
		t.Fatalf("err = %v, want item 2's error", res.Err)
	}
}

func mapsEqual(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestItemTimeoutSimple: an item that outlives ItemTimeout has its context
// cancelled with a *TimeoutError cause and counts exactly one failure
// reporting "timed out after D", even when the function returns nil; the
// other items are unaffected.
func TestItemTimeoutSimple(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cause error
		fn := func(ctx context.Context, s Shard) error {
			if s.Item != 1 {
				return nil
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil // ignores the cancel: still a failure
		}
		start := time.Now()
		res := runSimpleJob(t.Context(), fn, shardsFor(3, 1), pipelineConfig{JobName: "s", ErrorPolicy: ErrorPolicyReturn, ItemTimeout: 2 * time.Second})
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("run took %v of fake time, want exactly the 2s timeout", took)
		}
		if res.Success != 2 || res.Failure != 1 {
			t.Fatalf("result %+v, want 2 successes and 1 failure", res)
		}
		var te *TimeoutError
		if !errors.As(cause, &te) || te.After != 2*time.Second {
			t.Fatalf("item context cause = %v, want *TimeoutError{2s}", cause)
		}
		var ie *ItemError
		if !errors.As(res.Err, &ie) || ie.Item != 1 || !errors.Is(res.Err, ErrTimeout) || !strings.HasSuffix(res.Err.Error(), "shard item 1: run: timed out after 2s") {
			t.Fatalf("err = %v, want item 1 timed out after 2s", res.Err)
		}
	})
}

// TestItemTimeoutDataflow: a dataflow item's timeout cancels its Process
// calls (which count their own failures) and counts one failure for the
// timeout itself; its error is the timeout, not the cancelled call's.
func TestItemTimeoutDataflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &itemJob{block: true, blocked: make(chan struct{}, 1), unblock: make(chan error, 1)}
		res := runJob(t.Context(), Job[int](j), shardsFor(1, 1), pipelineConfig{JobName: "d", ErrorPolicy: ErrorPolicyReturn, ItemTimeout: time.Minute})
		if got := <-j.unblock; !errors.Is(got, context.DeadlineExceeded) {
			t.Fatalf("Process saw %v, want the deadline", got)
		}
		if res.Success != 1 || res.Failure != 1 {
			// itemJob's Process returns nil after the cancel: one success
			// for the call, one failure for the timeout.
			t.Fatalf("result %+v, want 1 success (the call) and 1 failure (the timeout)", res)
		}
		if !errors.Is(res.Err, ErrTimeout) || !strings.Contains(res.Err.Error(), "timed out after 1m0s") {
			t.Fatalf("err = %v, want timed out after 1m0s", res.Err)
		}
	})
}

// TestItemTimeoutNotHit: a run that ends in time reports nothing, and a
// run cancelled by its parent (ownership lost) is not a timeout.
func TestItemTimeoutNotHit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := runSimpleJob(t.Context(), func(context.Context, Shard) error { time.Sleep(time.Second); return nil },
			shardsFor(2, 1), pipelineConfig{JobName: "s", ErrorPolicy: ErrorPolicyReturn, ItemTimeout: 2 * time.Second})
		if res.Success != 2 || res.Failure != 0 || res.Err != nil {
			t.Fatalf("result %+v, want 2 successes", res)
		}
		ctx, cancel := context.WithCancel(t.Context())
		res = runSimpleJob(ctx, func(ctx context.Context, _ Shard) error { cancel(); <-ctx.Done(); return ctx.Err() },
			shardsFor(1, 1), pipelineConfig{JobName: "s", ErrorPolicy: ErrorPolicyReturn, ItemTimeout: time.Hour})
		if errors.Is(res.Err, ErrTimeout) || !errors.Is(res.Err, context.Canceled) || res.Failure != 1 {
			t.Fatalf("parent cancel: result %+v, want one context.Canceled failure, no timeout", res)
		}
	})
}

// TestNodeSimpleJob: a simple job on a two-node cluster runs each item
// once per trigger, split between the servers, with the shard context,
// the fence, listeners and counts of a dataflow job; the item timeout
// from the job's config applies; a job without cron runs on every server
// from one TriggerAll (a one-off job).
func TestNodeSimpleJob(t *testing.T) {
	// A bubble: item 3 outlives the 50 ms item timeout on a fake clock,
	// while items 0..2 finish in no time at all. On the real clock they
	// raced their own 50 ms timers (3 items timed out in 1 run of 40
	// under -cpu=1 on the loaded machine).
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		sig := testsignal.NewCoord()
		nodes, _ := clusterWith(t, srv, "simple", 2, sig)
		var mu sync.Mutex
		seen := map[int]int{}
		params := map[int]string{}
		fenced := 0
		fn := func(ctx context.Context, s Shard) error {
			if err := s.CheckOwnership(ctx); err != nil {
				return err
			}
			mu.Lock()
			seen[s.Item]++
			params[s.Item] = s.ItemParameter + "/" + s.JobParameter
			fenced++
			mu.Unlock()
			if s.Item == 3 {
				<-ctx.Done() // the item timeout ends it
			}
			return nil
		}
		ls := []*afterListener{newAfterListener(), newAfterListener()}
		cfg := JobConfig{JobName: "once", ShardingTotalCount: 4, ShardingItemParameters: "0=a,3=d", JobParameter: "p", ItemTimeout: 50 * time.Millisecond}
		for i, n := range nodes {
			if err := AddSimpleJob(t.Context(), n, cfg, fn, WithListeners(ls[i])); err != nil {
				t.Fatal(err)
			}
			if err := n.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer stopNode(t, n)
		}
		if got, ok := nodes[0].JobConfig("once"); !ok || got.JobType != jobconfig.JobTypeSimple || got.ItemTimeout != 50*time.Millisecond {
			t.Fatalf("JobConfig = %+v, %v; want the stored SIMPLE config", got, ok)
		}
		if _, ok := nodes[0].JobConfig("nope"); ok {
			t.Fatal("JobConfig of an unknown job reported ok")
		}
		waitSettled(t, srv, sig, "simple", "once", 2)
		if err := nodes[0].TriggerAll(t.Context(), "once"); err != nil {
			t.Fatal(err)
		}
		var items []int
		var success, failure int64
		for _, l := range ls {
			ev := l.next(t)
			items = append(items, ev.info.Items...)
			success += ev.res.Success
			failure += ev.res.Failure
		}
		slices.Sort(items)
		if !slices.Equal(items, []int{0, 1, 2, 3}) {
			t.Fatalf("items across servers = %v, want 0..3 once each (reshard not settled?)", items)
		}
		mu.Lock()
		defer mu.Unlock()
		if !mapsEqual(seen, map[int]int{0: 1, 1: 1, 2: 1, 3: 1}) || fenced != 4 {
			t.Fatalf("calls per item = %v (fenced %d), want one each", seen, fenced)
		}
		if params[0] != "a/p" || params[1] != "/p" || params[3] != "d/p" {
			t.Fatalf("shard parameters = %v", params)
		}
		if success != 3 || failure != 1 {
			t.Fatalf("success %d failure %d, want 3 and 1 (item 3 timed out)", success, failure)
		}
	})
}

func TestAddSimpleJobRefuses(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	if err := AddSimpleJob(t.Context(), n, JobConfig{JobName: "x", ShardingTotalCount: 1}, nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
		t.Errorf("nil fn: %v", err)
	}
	ok := func(context.Context, Shard) error { return nil }
	if err := AddSimpleJob(t.Context(), n, JobConfig{JobName: "x", ShardingTotalCount: 1, JobType: jobconfig.JobTypeDataflow}, ok); err == nil || !strings.Contains(err.Error(), "AddJob") {
		t.Errorf("DATAFLOW type: %v", err)
	}
	if err := AddSimpleJob(t.Context(), n, JobConfig{JobName: "x", ShardingTotalCount: 1, StreamingProcess: true}, ok); err == nil || !strings.Contains(err.Error(), "streamingProcess") {
		t.Errorf("streaming simple job: %v", err)
	}
}

// waitSettled waits until the leader has resharded job over servers live
// servers and left no flag up (sig: the nodes' TestSignals): a run during
// the joins' churn could legitimately see an older sharding. Every join
// has raised the flag by the time AddJob returns, so the reshard that
// clears the last one sends a Resharded event.
func waitSettled(t *testing.T, srv *memstore.Server, sig *testsignal.Coord, ns, job string, servers int) {
	t.Helper()
	sess := srv.Connect()
	defer sess.Close()
	admin := coord.NewAdmin(sess, ns)
	for {
		sig.Resharded.Wait(t, 30*time.Second, fmt.Sprintf("a reshard of %s over %d servers", job, servers), func(r testsignal.Resharded) bool {
			return r.Job == job && len(r.Servers) == servers
		})
		st, err := admin.Status(t.Context(), job)
		if err != nil {
			t.Fatal(err)
		}
		if !st.ReshardingPending {
			return
		}
	}
}

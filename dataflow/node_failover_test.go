package dataflow

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
)

// busyJob blocks Process of its own (non-failover) shards while block is
// set, until release is closed or the run's context ends; failover shards
// are processed at once.
type busyJob struct {
	block   bool
	started chan int
	release chan struct{}
}

func (b *busyJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }

func (b *busyJob) Process(ctx context.Context, s Shard, v int) error {
	if b.block && !s.Failover {
		b.started <- v
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// A server crashes while both servers are inside a run: the busy survivor
// runs the crashed server's item beside its own run in progress, without
// waiting for that run to end.
func TestNodeFailoverBesideBusyRun(t *testing.T) {
	srv := memstore.NewServer()
	nodes, sessions := cluster(t, srv, "fobusy", 2)
	jobs := []*busyJob{
		{started: make(chan int, 4), release: make(chan struct{})},
		{started: make(chan int, 4), release: make(chan struct{})},
	}
	ls := []*afterListener{newAfterListener(), newAfterListener()}
	for i, n := range nodes {
		cfg := JobConfig{JobName: "fobusy", ShardingTotalCount: 2, Failover: true}
		if err := AddJob(t.Context(), n, cfg, Job[int](jobs[i]), WithListeners(ls[i])); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer stopNode(t, n)
	}
	// Rounds until both servers own one item each (the leader reshards
	// once the second server has joined).
	owned := map[int]int{}
	for len(owned) < 2 {
		clear(owned)
		for _, n := range nodes {
			if err := n.TriggerLocal("fobusy"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range nodes {
			if ev := ls[i].next(t); len(ev.info.Items) == 1 {
				owned[i] = ev.info.Items[0]
			}
		}
	}

	// Both servers enter a run that blocks; then server 1 crashes.
	const crash, survivor = 1, 0
	for i, n := range nodes {
		jobs[i].block = true
		if err := n.TriggerLocal("fobusy"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes {
		select {
		case <-jobs[i].started:
		case <-time.After(20 * time.Second):
			t.Fatalf("server %d's run did not start", i)
		}
	}
	if err := sessions[crash].Close(); err != nil {
		t.Fatal(err)
	}

	// The survivor's own run is still blocked: the failover run finishes
	// beside it.
	ev := ls[survivor].next(t)
	if ev.info.Reason != ReasonFailover || !slices.Equal(ev.info.Items, []int{owned[crash]}) || ev.res.Success != 1 {
		t.Fatalf("first run to finish on the busy survivor: %+v; want the failover run of item %d", ev, owned[crash])
	}
	close(jobs[survivor].release)
	ev = ls[survivor].next(t)
	if ev.info.Reason != ReasonTrigger || !slices.Equal(ev.info.Items, []int{owned[survivor]}) {
		t.Fatalf("then: %+v; want the survivor's own triggered run of item %d", ev, owned[survivor])
	}
	close(jobs[crash].release)
}

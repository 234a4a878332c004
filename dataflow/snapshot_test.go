package dataflow

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testwait"
)

// shardLog records every Shard a run fetched for.
type shardLog struct {
	mu     sync.Mutex
	shards []Shard
}

func (l *shardLog) Fetch(_ context.Context, s Shard) ([]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shards = append(l.shards, s)
	return nil, nil
}

func (l *shardLog) Process(context.Context, Shard, int) error { return nil }

func (l *shardLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.shards {
		out = append(out, fmt.Sprintf("%d/%d=%s", s.Item, s.Total, s.ItemParameter))
	}
	l.shards = nil
	slices.Sort(out)
	return out
}

// A config edit that lands while a trigger's Begin runs does not reach
// that run's Shards: Total and ItemParameter of every Shard come from the
// one snapshot Begin computed the items with; the next trigger gets the
// edit whole.
func TestNodeShardsFromOneConfigSnapshot(t *testing.T) {
	const ns, job = "snapshot", "snap"
	srv := memstore.NewServer()
	sess := srv.Connect(memstore.WithSessionTimeout(2 * time.Second))
	t.Cleanup(func() { _ = sess.Close() })
	hs := &coordtest.HookStore{Store: sess}
	sharding := store.Join(ns, job, "servers", "s0", "sharding")
	n, err := NewNode(NodeConfig{Store: hs, Namespace: ns, ServerID: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	log, ls := &shardLog{}, newAfterListener()
	cfg := JobConfig{JobName: job, ShardingTotalCount: 4, ShardingItemParameters: "0=a,1=b,2=c,3=d"}
	if err := AddJob(t.Context(), n, cfg, Job[int](log), WithListeners(ls)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)

	adminSess := srv.Connect()
	t.Cleanup(func() { _ = adminSess.Close() })
	admin := coord.NewAdmin(adminSess, ns)
	newParams := "0=A,1=B,2=C,3=D,4=E,5=F"
	var edit func()
	hookErr := make(chan error, 1)
	var (
		armed atomic.Bool // set before the trigger: the hook is for its Begin
		once  sync.Once
	)
	// The edit goes in at the first transaction fenced by s0's sharding
	// node: Begin's. Begin plans on its tree cache and reads nothing
	// directly in the steady state, so its transaction is the one point
	// inside Begin that every run passes.
	hs.Before = func(_ context.Context, c coordtest.Call) error {
		if armed.Load() && c.Checks(sharding) {
			once.Do(edit)
		}
		return nil
	}
	edit = func() {
		// On the Node's runner goroutine, inside Begin: edit, then wait
		// until the job has applied the edit and the leader (this server's
		// watcher) has resharded on the new total. The transaction then
		// fails on the sharding node's version, and the assignment Begin
		// reads next lists six items: Begin must keep its snapshot's four.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := admin.SetConfig(ctx, job, "shardingTotalCount", "6")
		if err == nil {
			err = admin.SetConfig(ctx, job, "shardingItemParameters", newParams)
		}
		if err == nil {
			err = testwait.Poll(ctx, func(ctx context.Context) error {
				c, _ := n.JobConfig(job)
				d, _, err := hs.Store.Get(ctx, sharding)
				if err != nil || c.ShardingTotalCount != 6 || c.ShardingItemParameters != newParams || string(d) != "0,1,2,3,4,5" {
					return fmt.Errorf("config %d %q, assignment %q (%v)", c.ShardingTotalCount, c.ShardingItemParameters, d, err)
				}
				return nil
			})
		}
		hookErr <- err
	}
	armed.Store(true)

	if err := n.TriggerLocal(job); err != nil {
		t.Fatal(err)
	}
	ls.next(t)
	if err := testwait.Recv(t, 10*time.Second, "the edit inside Begin", hookErr); err != nil {
		t.Fatalf("editing inside Begin: %v", err)
	}
	if got, want := log.take(), []string{"0/4=a", "1/4=b", "2/4=c", "3/4=d"}; !slices.Equal(got, want) {
		t.Fatalf("shards of the run begun before the edit applied: %v, want %v (one snapshot)", got, want)
	}
	if err := n.TriggerLocal(job); err != nil {
		t.Fatal(err)
	}
	ls.next(t)
	if got, want := log.take(), []string{"0/6=A", "1/6=B", "2/6=C", "3/6=D", "4/6=E", "5/6=F"}; !slices.Equal(got, want) {
		t.Fatalf("shards of the next run: %v, want %v (the edit, whole)", got, want)
	}
}

package dataflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
)

// A Node without a store refuses to start rather than silently owning
// every item on a private in-memory store, and says how to fix it.
func TestNewNodeRequiresStore(t *testing.T) {
	n, err := NewNode(NodeConfig{ServerID: "s"})
	if !errors.Is(err, ErrNoStore) || n != nil {
		t.Fatalf("NewNode without a store = %v, %v; want nil, ErrNoStore", n, err)
	}
	for _, fix := range []string{"NodeConfig.Store", "zkstore.Open", "memstore.NewServer().Connect()"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("error %q does not name %q", err, fix)
		}
	}
}

// serverJob records the ServerID of the shards it is handed.
type serverJob struct{ ids chan string }

func (j serverJob) Fetch(_ context.Context, s Shard) ([]int, error) {
	j.ids <- s.ServerID
	return nil, nil
}

func (serverJob) Process(context.Context, Shard, int) error { return nil }

// The one server id, set once in NodeConfig (or defaulted), reaches every
// Shard, so sources and sinks record the same owner as the servers nodes.
func TestShardCarriesServerID(t *testing.T) {
	for _, id := range []string{"pod-7", ""} {
		job := serverJob{ids: make(chan string, 4)}
		n, l := startNodeWithJob(t, NodeConfig{Store: memstore.NewServer().Connect(), ServerID: id},
			JobConfig{JobName: "ids", ShardingTotalCount: 1}, job)
		if err := n.TriggerLocal("ids"); err != nil {
			t.Fatal(err)
		}
		l.next(t)
		if got := <-job.ids; got != n.ServerID() || got == "" || (id != "" && got != id) {
			t.Errorf("ServerID %q: Shard.ServerID %q, Node.ServerID %q", id, got, n.ServerID())
		}
		stopNode(t, n)
	}
}

package dataflow

import (
	"context"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
)

// TestAddJobDependsOn: a job whose DependsOn names a job not stored yet is
// refused naming it, and added once the job before it is.
func TestAddJobDependsOn(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "s1", Namespace: "deps"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Stop(context.Background()) }()
	ctx := t.Context()
	load := JobConfig{JobName: "load", ShardingTotalCount: 2, DependsOn: []string{"extract"}}
	err = AddSimpleJob(ctx, n, load, func(context.Context, Shard) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "names extract, which is not a job of namespace") {
		t.Fatalf("AddSimpleJob(load) before extract = %v, want a refusal naming extract", err)
	}
	if err := AddSimpleJob(ctx, n, JobConfig{JobName: "extract", ShardingTotalCount: 2}, func(context.Context, Shard) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := AddSimpleJob(ctx, n, load, func(context.Context, Shard) error { return nil }); err != nil {
		t.Fatalf("AddSimpleJob(load) after extract: %v", err)
	}
	if got, _ := n.JobConfig("load"); len(got.DependsOn) != 1 || got.DependsOn[0] != "extract" {
		t.Fatalf("stored DependsOn = %v, want [extract]", got.DependsOn)
	}
}

package dataflow

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
)

// TestNodeRestartWaitsForOwnDyingSession: a process restarted under the same
// ServerID while its killed predecessor's session has not expired yet gets
// its job added once that session goes, with no retry loop in the app; a
// live duplicate fails with an error naming NodeConfig.ServerID.
func TestNodeRestartWaitsForOwnDyingSession(t *testing.T) {
	srv := memstore.NewServer()
	old := srv.Connect(memstore.WithSessionTimeout(300 * time.Millisecond))
	defer old.Close()
	first, err := NewNode(NodeConfig{Store: old, ServerID: "w", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), first, JobConfig{JobName: "r", ShardingTotalCount: 2}, Job[int](&itemJob{})); err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, first)

	// A second live process with the same id: refused after its session
	// timeout (200 ms), naming the field users set.
	dup := srv.Connect(memstore.WithSessionTimeout(200 * time.Millisecond))
	defer dup.Close()
	second, err := NewNode(NodeConfig{Store: dup, ServerID: "w", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, second)
	err = AddJob(t.Context(), second, JobConfig{JobName: "r", ShardingTotalCount: 2}, Job[int](&itemJob{}))
	if !errors.Is(err, protocol.ErrServerIDInUse) || !strings.Contains(err.Error(), "NodeConfig.ServerID") || strings.Contains(err.Error(), "RegistryConfig") {
		t.Fatalf("live duplicate: AddJob = %v, want ErrServerIDInUse naming NodeConfig.ServerID", err)
	}

	// The first process is killed: its session is cut and dies after 300 ms.
	old.Disconnect()
	next := srv.Connect()
	defer next.Close()
	restarted, err := NewNode(NodeConfig{Store: next, ServerID: "w", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, restarted)
	if err := AddJob(t.Context(), restarted, JobConfig{JobName: "r", ShardingTotalCount: 2}, Job[int](&itemJob{})); err != nil {
		t.Fatalf("restart while the old session dies: AddJob = %v, want it to wait and succeed", err)
	}
}

package postgres

import (
	"time"

	"github.com/shardflow/shardflow/dataflow"
)

// SetAfterFence makes every transactional batch call f between its fence
// and its commit (after its ownership check; its fence row may be written
// with the COMMIT), until restore is called.
func SetAfterFence(f func()) (restore func()) {
	afterFence = f
	return func() { afterFence = nil }
}

// SetFenceIdleTimeout sets how long a batch may sit idle between its fence
// in a shared database and its commit, until restore is called.
func SetFenceIdleTimeout(d time.Duration) (restore func()) {
	old := fenceIdleTimeout
	fenceIdleTimeout = d
	return func() { fenceIdleTimeout = old }
}

// FenceStatement is the statement a transactional commit of shard fences
// with before its COMMIT (held: the source has committed shard's epoch in
// shardflow_fence before).
func FenceStatement(shard dataflow.Shard, held bool) string { return fenceStatement(shard, held) }

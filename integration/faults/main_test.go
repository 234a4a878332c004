package faults

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

// parallel is how many fault tests run at once (unless -parallel says
// otherwise): every one has its own ZooKeeper container (or namespace),
// workers and event log, and spends its time waiting for session timeouts,
// restarts and cron ticks, not computing.
const parallel = 10

// TestMain removes the containers and binaries the harness shares across
// tests and fails the run on leaked goroutines (goleak).
func TestMain(m *testing.M) {
	integration.DefaultParallel(parallel)
	integration.Main(m)
}

// workerBinary builds integration/testworker once per test binary (with
// -race when this test binary has it) and returns its path.
func workerBinary(t testing.TB) string {
	t.Helper()
	return integration.BuildBinary(t, "github.com/shardflow/shardflow/integration/testworker")
}

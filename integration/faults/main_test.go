package faults

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

// TestMain removes the containers and binaries the harness shares across
// tests and fails the run on leaked goroutines (goleak).
func TestMain(m *testing.M) { integration.Main(m) }

// workerBinary builds integration/testworker once per test binary (with
// -race when this test binary has it) and returns its path.
func workerBinary(t testing.TB) string {
	t.Helper()
	return integration.BuildBinary(t, "github.com/shardflow/shardflow/integration/testworker")
}

package dataflow

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

// integration.Main checks for leaked goroutines (goleak) and removes the
// shared Postgres of the history test.
func TestMain(m *testing.M) {
	integration.Main(m)
}

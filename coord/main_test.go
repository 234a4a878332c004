package coord_test

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

// TestMain removes the shared ZooKeeper container of TestAdminZooKeeper
// and checks for leaked goroutines (goleak) after the tests.
func TestMain(m *testing.M) { integration.Main(m) }

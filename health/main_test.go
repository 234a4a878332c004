package health_test

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

// integration.Main removes the shared ZooKeeper and checks for leaked
// goroutines (goleak).
func TestMain(m *testing.M) { integration.Main(m) }

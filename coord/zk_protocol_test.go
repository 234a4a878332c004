package coord_test

import (
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/integration"
)

// TestProtocolZooKeeper runs the protocol suite on a real ZooKeeper server
// (the integration harness's shared container, or SHARDFLOW_ZK), every
// session behind its own proxy so that faults hit one simulated process.
func TestProtocolZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	coordtest.Run(t, coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0]}))
}

package protocol_test

import (
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/integration"
)

// protocolZKSession is the session timeout of the protocol suite on
// ZooKeeper: long, so that only the suite's own faults end a session
// (EndSessions ends Kill's and Expire's at once), never a loaded machine.
// Suspended and SuspendedRunAbandoned expect the session to resume after
// Disconnect and Reconnect; the steps between the two are bounded by the
// suite's own waits (10 s each), and the client first redials a second
// after the restore, so a 2 s session expired under load (the test then
// waited in vain for the completion written on the resumed session).
const protocolZKSession = 30 * time.Second

// TestProtocolZooKeeper runs the protocol suite on a real ZooKeeper server
// (the integration harness's shared container, or SHARDFLOW_ZK), every
// session behind its own proxy so that faults hit one simulated process.
func TestProtocolZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	coordtest.Run(t, coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0], SessionTimeout: protocolZKSession, EndSessions: true}))
}

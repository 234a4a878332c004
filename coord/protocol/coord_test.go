package protocol_test

import (
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/integration"
)

// TestMain removes the shared ZooKeeper container of TestProtocolZooKeeper
// and checks for leaked goroutines (goleak) after the tests.
func TestMain(m *testing.M) { integration.Main(m) }

// TestProtocol runs the protocol suite on memstore.
func TestProtocol(t *testing.T) { coordtest.Run(t, coordtest.Mem()) }

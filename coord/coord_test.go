package coord_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/coord/coordtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProtocol runs the protocol suite on memstore.
func TestProtocol(t *testing.T) { coordtest.Run(t, coordtest.Mem()) }

package integration_test

import (
	"testing"

	"github.com/shardflow/shardflow/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

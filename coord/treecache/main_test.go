package treecache

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

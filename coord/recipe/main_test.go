package recipe

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines (Observe's among them).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package postgres

import "time"

// SetAfterFence makes every transactional batch call f between its fence
// and its commit (after its ownership check; its fence row may be written
// with the COMMIT), until restore is called.
func SetAfterFence(f func()) (restore func()) {
	afterFence = f
	return func() { afterFence = nil }
}

// SetFenceIdleTimeout sets how long a batch may sit idle between its fence
// in a shared database and its commit, until restore is called.
func SetFenceIdleTimeout(d time.Duration) (restore func()) {
	old := fenceIdleTimeout
	fenceIdleTimeout = d
	return func() { fenceIdleTimeout = old }
}

package postgres

// SetAfterFence makes every transactional batch call f between its fence
// and its commit, until restore is called.
func SetAfterFence(f func()) (restore func()) {
	afterFence = f
	return func() { afterFence = nil }
}

package pgstore

import "github.com/shardflow/shardflow/coord/store"

// SetHooks installs the test hooks (nil removes them): afterZxid runs in
// every write transaction once it holds its zxid, beforeBeat on the session
// goroutine before every heartbeat. Tests that set them must not run in
// parallel with others.
func SetHooks(afterZxid func(what string, zxid int64), beforeBeat func(*Store)) {
	hookAfterZxid, hookBeforeBeat = afterZxid, beforeBeat
}

// SetPublishHook installs (nil removes) a function that sees every session
// state a store publishes, in order.
func SetPublishHook(f func(*Store, store.Session)) { hookPublish = f }

// SetFlushHook installs (nil removes) a function run before every group
// commit with the number of requests it commits.
func SetFlushHook(f func(requests int)) { hookFlush = f }

// Writes reports how many batches of s are being committed and how many
// write requests wait for the next one.
func Writes(s *Store) (flushing, queued int) {
	return s.commits.Pending()
}

package pgstore

// SetHooks installs the test hooks (nil removes them): afterZxid runs in
// every write transaction once it holds its zxid, beforeBeat on the session
// goroutine before every heartbeat. Tests that set them must not run in
// parallel with others.
func SetHooks(afterZxid func(what string, zxid int64), beforeBeat func(*Store)) {
	hookAfterZxid, hookBeforeBeat = afterZxid, beforeBeat
}

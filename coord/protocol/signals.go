package protocol

import "github.com/shardflow/shardflow/coord/protocol/internal/eventloop"

// OnSignal delivers the job's signals by calling f instead of through
// Signals, so a host of many jobs needs no goroutine per job to receive
// them. f is called by the job's watcher, on a goroutine of the Registry's
// event loop (never two calls for one job at once), one signal at a time,
// for every kind coalesced as on Signals (pending ones at once); it must
// not block, nor call Leave or Registry.Close or wait for anything that
// does (start a goroutine for that): it would hold up other jobs' watchers.
// Call it once, right after Join; Signals then delivers nothing.
func (j *Job) OnSignal(f func(Signal)) {
	j.sig.SetFunc(f)
	j.q.Post(eventloop.Event{Kind: eventloop.Deliver}) // the watcher delivers what is pending
}

// Signals returns the job's notification channel. Each kind of signal is
// coalesced (at most one pending); it is closed after Leave. The first call
// starts a goroutine (until Leave) that sends on it; a host of many jobs
// uses OnSignal instead.
func (j *Job) Signals() <-chan Signal { return j.sig.Channel() }

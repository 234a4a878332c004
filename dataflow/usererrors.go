package dataflow

import (
	"context"
	"time"

	"github.com/shardflow/shardflow/internal/usererr"
)

// Permanent marks err as the row's own failure: a source that counts
// attempts (sources/postgres) counts one and, after its MaxAttempts, fails
// the row, even when err is a timeout or a network error of the row's own
// outbound call, which it would otherwise take for infrastructure's and
// retry without end. errors.Is and errors.As see through the mark. It
// returns nil for nil.
func Permanent(err error) error { return usererr.Permanent(err) }

// RetryAfter marks err as passing: a source counts no attempt, gives the
// row back and retries the item's batch after d; d <= 0 leaves the delay to
// the source's own backoff. errors.Is and errors.As see through the mark.
// It returns nil for nil.
func RetryAfter(err error, d time.Duration) error { return usererr.RetryAfter(err, d) }

// ErrorHandler is the Node-level error handler (NodeConfig.ErrorHandler):
// it sees every error of user code on this Node before it is acted on (an
// error of Fetch, Process or ProcessBatch, and the errors sources hand it
// through Shard.HandleError: each row's error of a sources/postgres job's
// function) and returns the error to act on: err itself, or err marked
// with Permanent or RetryAfter. A nil return keeps err. It is called
// from the run's goroutines, concurrently; keep it short.
type ErrorHandler func(ctx context.Context, shard Shard, err error) error

// HandleError passes err through the Node's ErrorHandler and returns the
// error to act on (err itself without a handler, or when the handler
// returns nil). Sources call it on the errors of the user's function
// before classifying them.
func (s Shard) HandleError(ctx context.Context, err error) error {
	if err == nil || s.handle == nil {
		return err
	}
	if out := s.handle(ctx, s, err); out != nil {
		return out
	}
	return err
}

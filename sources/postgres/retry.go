package postgres

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether err is Postgres being unreachable, starting,
// restarting or shutting down (or a concurrency conflict): worth retrying
// after a pause rather than giving up. A program's start-up steps against
// Postgres (Migrate, NewSource, a history recorder) can wait out a
// restart with it (examples/pgbatch).
func IsTransient(err error) bool { return errors.Is(err, ErrUnreachable) || isTransient(err) }

// isTransient reports whether err is worth retrying: the connection failed
// or broke, the server is starting or shutting down, or a concurrency
// conflict aborted the statement.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutdown, crash, cannot connect now
			pgErr.Code == "40001", pgErr.Code == "40P01", // serialization failure, deadlock
			pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err)
}

// retry runs fn until it succeeds, fails with a non-transient error, ctx
// ends, or retryFor has passed, sleeping 100ms, 200ms, ... up to 5s (with
// jitter) between attempts.
func retry(ctx context.Context, retryFor time.Duration, onRetry func(error, time.Duration), fn func(context.Context) error) error {
	deadline := time.Now().Add(retryFor)
	backoff := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !isTransient(err) || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		if onRetry != nil {
			onRetry(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

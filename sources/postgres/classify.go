package postgres

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardflow/shardflow/internal/usererr"
)

// ErrorClass says whose fault an error is: the row's, or the statement's
// and the infrastructure's. See Classify.
type ErrorClass int

const (
	// ClassRow: the error belongs to the row being processed. It counts
	// one of the row's attempts; after MaxAttempts the row is marked
	// 'failed' with the error's text.
	ClassRow ErrorClass = iota + 1
	// ClassStatement: the error is about the statement or the
	// infrastructure, and would fail any row the same way. It consumes no
	// attempt: the rows go back untouched and the batch is retried with
	// capped exponential backoff.
	ClassStatement
)

// String returns "row" or "statement".
func (c ErrorClass) String() string {
	switch c {
	case ClassRow:
		return "row"
	case ClassStatement:
		return "statement"
	}
	return "unknown"
}

// Classify sorts an error returned by the job's function (or by the
// source's own statements):
//
//   - ClassStatement, no attempt consumed: a lost or refused connection
//     (SQLSTATE class 08, network errors, EOF, timeouts), a cancelled or
//     expired context (the run lost its item or stopped), and SQLSTATE
//     classes 0A (feature not supported), 54 other than 54000 (statement
//     too complex), 25 (invalid transaction state,
//     e.g. 25006 read-only transaction), 28 (authorization), 3D/3F (no
//     such database or schema), 40 (serialization failure 40001, deadlock
//     40P01), 42 (undefined table 42P01 or column 42703, insufficient
//     privilege 42501, syntax errors), 53 (disk full 53100, out of memory,
//     too many connections), 55 (lock not available, object in use), 57
//     (statement timeout, admin shutdown, cannot connect now), 58 (system
//     I/O errors), 72 (snapshot too old), F0 (configuration file), HV
//     (foreign data wrapper), P0000 (PL/pgSQL error) and XX (internal).
//   - ClassRow, one attempt consumed: SQLSTATE classes 21 (cardinality),
//     22 (data exception: bad value, division by zero, out of range), 23
//     (integrity constraint violation: unique, foreign key, check, not
//     null), 27 (triggered data change), 44 (WITH CHECK OPTION), 54000 (a
//     value too large, e.g. for an index), P0001 to P0004 (RAISE EXCEPTION, assertion in a trigger or function), and
//     every error that carries no SQLSTATE and is not one of the
//     infrastructure errors above: the job's function said this row failed.
//
// The first statement-class cause found in err's chain wins, so a row
// error that wraps a lost connection is a statement error.
//
// User code overrides all of this by marking its error (directly, or in
// the Node's dataflow.ErrorHandler): dataflow.Permanent makes it ClassRow
// (an outbound call of the row's that timed out, say, counts an attempt
// and fails the row after MaxAttempts), dataflow.RetryAfter makes it
// ClassStatement, its delay replacing the backoff step. The outermost mark
// wins. Whatever the mark, the sources count no attempt for an error that
// comes while the run's context is cancelled (the run lost its item or
// was stopped, which is not the row's fault).
func Classify(err error) ErrorClass {
	if usererr.IsPermanent(err) {
		return ClassRow
	}
	if _, retry := usererr.RetryDelay(err); retry {
		return ClassStatement
	}
	if isStatementError(err) {
		return ClassStatement
	}
	return ClassRow
}

func isStatementError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return statementCode(pgErr.Code)
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// statementCode reports whether SQLSTATE code is the statement's or the
// infrastructure's fault rather than the row's.
func statementCode(code string) bool {
	if len(code) != 5 {
		return true
	}
	switch code[:2] {
	case "21", "22", "23", "27", "44":
		return false
	case "54":
		return code != "54000" // 54000: e.g. an index row too large for this row's value
	case "P0":
		return code == "P0000"
	}
	return true
}

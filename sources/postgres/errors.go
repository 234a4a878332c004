package postgres

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps one of them (or a
// context error) and names the table, column, field or endpoint concerned.
var (
	// ErrMissingTable: the table named in TableSpec does not exist. Create
	// it, or fix TableSpec.Table (schema-qualify it if it is not on the
	// search_path).
	ErrMissingTable = errors.New("sources/postgres: table does not exist")
	// ErrMissingColumn: a column the source needs is missing. Run
	// postgres.Migrate for the bookkeeping columns, or fix TableSpec.
	ErrMissingColumn = errors.New("sources/postgres: column does not exist")
	// ErrMissingIndex: an index Migrate creates on a work table is missing
	// (a table prepared by an earlier release lacks the pending index the
	// claim and transactional modes read by). Run postgres.Migrate again, or the
	// CREATE INDEX CONCURRENTLY statement the message gives.
	ErrMissingIndex = errors.New("sources/postgres: index does not exist")
	// ErrRowMismatch: the selected columns do not match the fields of T
	// (pgx.RowToStructByName rules: names match case-insensitively, a db tag
	// overrides, db:"-" ignores a field).
	ErrRowMismatch = errors.New("sources/postgres: row does not match the item type")
	// ErrUnreachable: Postgres could not be reached or refused the
	// connection. Check the DSN's host, port, user and database.
	ErrUnreachable = errors.New("sources/postgres: cannot connect to Postgres")
	// ErrFenced: a newer owner of the shard item has committed (or this
	// server no longer owns it); the transaction was rolled back and its
	// work is left to the new owner.
	ErrFenced = errors.New("sources/postgres: shard item fenced by a newer owner; transaction rolled back")
	// ErrConfig: a Config or TableSpec field is invalid; the message names it.
	ErrConfig = errors.New("sources/postgres: invalid configuration")
	// ErrColumnTaken: a column of one of the bookkeeping names exists and
	// was not created by Migrate (it has no shardflow marker comment). The
	// source never writes a column it did not create: rename the
	// bookkeeping column with TableSpec.Bookkeeping.
	ErrColumnTaken = errors.New("sources/postgres: a bookkeeping column name is taken by a column shardflow did not create")
	// ErrLegacyColumns: the table was prepared by an earlier build of shardflow (before 0.1.0)
	// (bookkeeping columns named status, bucket, ...). Run RenameLegacyColumns once.
	ErrLegacyColumns = errors.New("sources/postgres: table has the bookkeeping columns of an earlier build of shardflow (before 0.1.0); run postgres.RenameLegacyColumns")
	// ErrStatement: a statement failed for a reason that is not the row's
	// (see Classify): undefined table or column, insufficient privilege,
	// read-only transaction, lost connection, disk full, serialization
	// failure or deadlock. No row attempt was counted; the batch is retried
	// with backoff.
	ErrStatement = errors.New("sources/postgres: statement or infrastructure error (no row attempt counted; retrying with backoff)")
)

// ProcessError is the error of one row whose processing failed; it is
// what ends up, as text, in the row's last_error column.
type ProcessError struct {
	// Key is the row's key.
	Key int64
	// Err is the user's error.
	Err error
}

// Error names the row.
func (e *ProcessError) Error() string { return fmt.Sprintf("row %d: %v", e.Key, e.Err) }

// Unwrap returns the user's error.
func (e *ProcessError) Unwrap() error { return e.Err }

// ReadError is a row that could not be read into the item type T: the
// value of Column does not fit Field (NULL into a field that cannot hold
// NULL, a number out of the field's range, a value that does not decode, a
// custom scanner that failed). Reading it again gives the same error until
// the row is changed, so the Source's jobs set the row aside at once and
// the rest of the shard item goes on: claim and transactional modes mark
// it 'failed' with this error (ListFailed, `shardflow failed list`; fix the
// row, then Requeue), the checkpoint mode writes it to
// shardflow_dead_letter and moves past it. It counts as a failure.
type ReadError struct {
	// Table is the table read.
	Table string
	// Key is the row's key.
	Key int64
	// Column is the column whose value could not be read, and Field the
	// field of T it goes into.
	Column, Field string
	// Err is pgx's error.
	Err error
}

// Error names the row, the column, the field and the fix.
func (e *ReadError) Error() string {
	return fmt.Sprintf("row %d of table %s: column %s cannot be read into field %s: %v (fix the row's value, or give the field a type that holds it, e.g. a pointer or sql.Null type for NULL; then requeue the row)",
		e.Key, e.Table, e.Column, e.Field, e.Err)
}

// Unwrap returns pgx's error.
func (e *ReadError) Unwrap() error { return e.Err }

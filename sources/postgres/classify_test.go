package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardflow/shardflow/sources/postgres"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	tests := []struct {
		name string
		err  error
		want postgres.ErrorClass
	}{
		{"undefined table", pg("42P01"), postgres.ClassStatement},
		{"undefined column", pg("42703"), postgres.ClassStatement},
		{"insufficient privilege", pg("42501"), postgres.ClassStatement},
		{"read-only transaction", pg("25006"), postgres.ClassStatement},
		{"connection failure", pg("08006"), postgres.ClassStatement},
		{"disk full", pg("53100"), postgres.ClassStatement},
		{"serialization failure", pg("40001"), postgres.ClassStatement},
		{"deadlock", pg("40P01"), postgres.ClassStatement},
		{"admin shutdown", pg("57P01"), postgres.ClassStatement},
		{"statement timeout", pg("57014"), postgres.ClassStatement},
		{"internal error", pg("XX000"), postgres.ClassStatement},
		{"network error", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, postgres.ClassStatement},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), postgres.ClassStatement},
		{"context cancelled", context.Canceled, postgres.ClassStatement},
		{"wrapped in the job's own error", fmt.Errorf("settling order 7: %w", pg("42P01")), postgres.ClassStatement},
		{"division by zero", pg("22012"), postgres.ClassRow},
		{"invalid text representation", pg("22P02"), postgres.ClassRow},
		{"unique violation", pg("23505"), postgres.ClassRow},
		{"foreign key violation", pg("23503"), postgres.ClassRow},
		{"check violation", pg("23514"), postgres.ClassRow},
		{"raise exception in a trigger", pg("P0001"), postgres.ClassRow},
		{"index row too large", pg("54000"), postgres.ClassRow},
		{"the job's plain error", errors.New("currency XXX unknown"), postgres.ClassRow},
	}
	for _, tc := range tests {
		if got := postgres.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %s; want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

// IsTransient: what a restart of Postgres returns is transient; a missing
// table, a bad column and a cancelled context are not.
func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true}, // terminating connection due to administrator command
		{&pgconn.PgError{Code: "57P03"}, true}, // the database system is starting up
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		{fmt.Errorf("looking up table: %w", &pgconn.PgError{Code: "57P01"}), true},
		{fmt.Errorf("%w at 127.0.0.1:1: dial: %w", postgres.ErrUnreachable, io.EOF), true},
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table
		{&pgconn.PgError{Code: "42703"}, false}, // undefined column
		{context.Canceled, false},
		{nil, false},
	} {
		if got := postgres.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

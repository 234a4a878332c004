package jobconfig

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error about a job configuration: a field
// that does not validate, a config node value that does not decode, or a
// cron expression or item parameter string that does not parse. Use
// errors.As with *FieldError to get the field's name.
var ErrInvalid = errors.New("jobconfig: invalid job configuration")

// FieldError is one problem with one config field. Field is the field's name
// in the config node ("shardingTotalCount"), Problem says what is wrong with
// the value, and Fix says how to correct it. It wraps ErrInvalid.
type FieldError struct {
	// Field is the field's name in the config node, e.g. "cron".
	Field string
	// Node is set when the value came from the coordination store: the
	// node path relative to the job, e.g. "config/cron".
	Node string
	// Problem says what is wrong with the value.
	Problem string
	// Fix says how to correct it.
	Fix string
}

// Error returns "jobconfig: <node or field>: <problem>; <fix>".
func (e *FieldError) Error() string {
	name := e.Field
	if e.Node != "" {
		name = e.Node
	}
	msg := "jobconfig: " + name + ": " + e.Problem
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, fix, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), Fix: fix}
}

// FieldErrors returns every *FieldError inside err, in order, looking
// through errors.Join and %w wrapping. It returns nil when err holds none.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

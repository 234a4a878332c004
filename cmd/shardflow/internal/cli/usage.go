package cli

import "fmt"

// UsageError marks errors caused by the command line (exit status 2).
type UsageError struct{ msg string }

// Error returns the message, which names the flag or argument at fault.
func (e UsageError) Error() string { return e.msg }

// Usagef returns a UsageError with the formatted message.
func Usagef(format string, args ...any) error { return UsageError{fmt.Sprintf(format, args...)} }

package quartz

import "fmt"

// SyntaxError is an expression Quartz would refuse, or one that selects no
// value in a field. Field names the field ("day-of-week") and Value its text
// as written; both are empty when the problem is the whole expression.
type SyntaxError struct {
	// Expr is the expression as given.
	Expr string
	// Field is "second", "minute", "hour", "day-of-month", "month",
	// "day-of-week" or "year"; "" for the whole expression.
	Field string
	// Value is the field's text (one comma-separated part, or the whole
	// field for checks on the field).
	Value string
	// Problem says what is wrong.
	Problem string
}

// Error returns `quartz: <field> field "<value>": <problem>`.
func (e *SyntaxError) Error() string {
	if e.Field == "" {
		return "quartz: " + e.Problem
	}
	return fmt.Sprintf("quartz: %s field %q: %s", e.Field, e.Value, e.Problem)
}

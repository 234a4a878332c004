package quartz

import "time"

// Schedule is a Quartz expression evaluated in a time zone. It implements
// robfig/cron/v3's Schedule interface, so a cron.Cron runs it.
type Schedule struct {
	expr *Expression
	loc  *time.Location
}

// Parse parses expr (see ParseExpression) for evaluation in loc; a nil loc
// means time.Local. Errors are *SyntaxError.
func Parse(expr string, loc *time.Location) (*Schedule, error) {
	e, err := ParseExpression(expr)
	if err != nil {
		return nil, err
	}
	if loc == nil {
		loc = time.Local
	}
	return &Schedule{expr: e, loc: loc}, nil
}

// Next returns the first fire time strictly after t, in the schedule's
// zone, as Quartz computes it; the zero time when there is none (Quartz's
// null: a past year, a date that never comes, or beyond year 2999 or 100
// years from now). A zero Next makes cron.Cron never run the entry.
func (s *Schedule) Next(t time.Time) time.Time {
	next, ok := s.expr.nextAfter(t, s.loc)
	if !ok || !next.After(t) {
		return time.Time{}
	}
	return next
}

// Location returns the zone the schedule is evaluated in.
func (s *Schedule) Location() *time.Location { return s.loc }

// String returns the expression as given.
func (s *Schedule) String() string { return s.expr.text }

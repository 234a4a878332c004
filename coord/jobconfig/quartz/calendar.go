package quartz

import "time"

// calendar is the part of java.util.GregorianCalendar that Quartz's search
// uses: lenient wall-clock fields that are set one by one and resolved to
// an instant when next read. Resolving normalizes out-of-range fields
// (minute 60 is the next hour, day 32 the next month, month 12 January of
// the next year) and turns the wall time into an instant by Java's rule
// (wallInstant). Every set marks the fields for resolution, even when it
// writes the value they already hold: in the repeated hour of a fall-back
// night that moves the instant to the second occurrence, as in Java.
type calendar struct {
	loc *time.Location
	// Wall fields; month is 1-12 once resolved.
	year, month, day, hour, min, sec int
	unix                             int64 // the resolved instant
	dirty                            bool  // fields set since the last resolve
}

func newCalendar(loc *time.Location, unix int64) *calendar {
	c := &calendar{loc: loc}
	c.setInstant(unix)
	return c
}

func (c *calendar) setInstant(unix int64) {
	t := time.Unix(unix, 0).In(c.loc)
	c.unix, c.dirty = unix, false
	c.year, c.month, c.day = t.Year(), int(t.Month()), t.Day()
	c.hour, c.min, c.sec = t.Hour(), t.Minute(), t.Second()
}

// resolve turns set fields into an instant and recomputes the fields.
func (c *calendar) resolve() {
	if !c.dirty {
		return
	}
	// time.Date normalizes the fields as Java's lenient calendar does; UTC
	// keeps it to plain arithmetic on the wall clock.
	wall := time.Date(c.year, time.Month(c.month), c.day, c.hour, c.min, c.sec, 0, time.UTC).Unix()
	c.setInstant(wallInstant(c.loc, wall))
}

// instant returns the resolved instant, in Unix seconds.
func (c *calendar) instant() int64 { c.resolve(); return c.unix }

// weekday returns the resolved day of the week, 1=SUN..7=SAT as in Java.
func (c *calendar) weekday() int {
	c.resolve()
	return int(time.Unix(c.unix, 0).In(c.loc).Weekday()) + 1
}

// get reads field f after resolving.
func (c *calendar) get(f int) int {
	c.resolve()
	return *c.ref(f)
}

// set writes field f (any value; resolved leniently at the next read).
// Consecutive sets accumulate and are resolved together, as in Java.
func (c *calendar) set(f, v int) {
	*c.ref(f) = v
	c.dirty = true
}

// setFields writes several fields in one go, as consecutive Java sets do.
func (c *calendar) setFields(kv ...int) {
	for i := 0; i < len(kv); i += 2 {
		c.set(kv[i], kv[i+1])
	}
}

// addYears is Calendar.add(YEAR, n): Feb 29 becomes Feb 28 in a common year.
func (c *calendar) addYears(n int) {
	c.resolve()
	c.year += n
	if last := lastDayOfMonth(c.month, c.year); c.day > last {
		c.day = last
	}
	c.dirty = true
}

// setHour is Quartz's setCalendarHour: when the hour set is not the hour
// read back (it fell into a skipped hour), it sets the next hour.
func (c *calendar) setHour(h int) {
	c.set(hour, h)
	if c.get(hour) != h && h != 24 {
		c.set(hour, h+1)
	}
}

func (c *calendar) ref(f int) *int {
	switch f {
	case second:
		return &c.sec
	case minute:
		return &c.min
	case hour:
		return &c.hour
	case dayOfMonth:
		return &c.day
	case month:
		return &c.month
	}
	return &c.year
}

func lastDayOfMonth(m, y int) int {
	return time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

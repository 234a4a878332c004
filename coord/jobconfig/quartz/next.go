package quartz

import "time"

// maxSteps bounds one search. Quartz's own search ends by year 2999; a
// valid expression needs a few dozen steps, one that never fires about
// 12 per year searched. Quartz loops forever on a few absurd expressions
// ("0W"); here they get no fire time.
const maxSteps = 100_000

// nextAfter returns the first fire time after the instant after, in loc,
// as Quartz's CronExpression.getTimeAfter computes it, or ok = false when
// there is none. It follows Quartz's search step by step (second, minute,
// hour, day, month, year; a field that moves resets the smaller ones and
// starts over) on a calendar that resolves wall times as Java does, since
// the daylight-saving results come from those steps, not from a rule.
func (e *Expression) nextAfter(after time.Time, loc *time.Location) (time.Time, bool) {
	// Quartz starts one second later and drops the milliseconds.
	startUnix := after.Add(time.Second).Unix()
	if after.Add(time.Second).Before(time.Unix(startUnix, 0)) {
		startUnix-- // Unix() truncates toward zero before 1970
	}
	c := newCalendar(loc, startUnix)
	s := &e.sets
	for step := 0; step < maxSteps; step++ {
		if c.get(year) > 2999 {
			return time.Time{}, false
		}

		// Second.
		sec, min := c.get(second), c.get(minute)
		if v, ok := s[second].ceil(sec); ok {
			sec = v
		} else {
			sec = s[second].first()
			min++
			c.set(minute, min)
		}
		c.set(second, sec)

		// Minute.
		min, hr, t := c.get(minute), c.get(hour), -1
		if v, ok := s[minute].ceil(min); ok {
			t, min = min, v
		} else {
			min = s[minute].first()
			hr++
		}
		if min != t {
			c.setFields(second, 0, minute, min)
			c.setHour(hr)
			continue
		}
		c.set(minute, min)

		// Hour.
		hr, day := c.get(hour), c.get(dayOfMonth)
		t = -1
		if v, ok := s[hour].ceil(hr); ok {
			t, hr = hr, v
		} else {
			hr = s[hour].first()
			day++
		}
		if hr != t {
			c.setFields(second, 0, minute, 0, dayOfMonth, day)
			c.setHour(hr)
			continue
		}
		c.set(hour, hr)

		// Day.
		if !e.day(c, sec, min, hr, startUnix) {
			continue
		}

		// Month.
		mon, yr := c.get(month), c.get(year)
		if yr > maxYear {
			return time.Time{}, false
		}
		t = -1
		if v, ok := s[month].ceil(mon); ok {
			t, mon = mon, v
		} else {
			mon = s[month].first()
			yr++
		}
		if mon != t {
			c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, 1, month, mon, year, yr)
			continue
		}
		c.set(month, mon)

		// Year.
		yr = c.get(year)
		v, ok := s[year].ceil(yr)
		if !ok {
			return time.Time{}, false
		}
		if v != yr {
			c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, 1, month, 1, year, v)
			continue
		}
		c.set(year, v)
		return time.Unix(c.instant(), 0).In(loc), true
	}
	return time.Time{}, false
}

// day is the day-of-month or day-of-week step of the search: true when
// the calendar's day matches (and is set), false when it moved the
// calendar and the search starts over.
func (e *Expression) day(c *calendar, sec, min, hr int, startUnix int64) bool {
	day, mon := c.get(dayOfMonth), c.get(month)
	if !e.sets[dayOfWeek].has(noSpec) {
		return e.dayOfWeek(c, day, mon)
	}
	set := e.sets[dayOfMonth]
	t, tmon := -1, mon
	switch {
	case e.lastDayOfMonth && !e.nearestWeekday:
		t = day
		day = lastDayOfMonth(mon, c.get(year)) - e.lastDayOffset
		if t > day {
			mon++
			if mon > 12 {
				mon = 1
				tmon = -1 // the month test below must fail
				c.addYears(1)
			}
			day = 1
		}
	case e.lastDayOfMonth: // "LW", "L-nW"
		t = day
		var at int64
		day, at = weekdayNear(c, lastDayOfMonth(mon, c.get(year))-e.lastDayOffset, mon, sec, min, hr)
		if at < startUnix {
			day = 1
			mon++
		}
	case e.nearestWeekday: // "15W"
		t = day
		var at int64
		day, at = weekdayNear(c, set.first(), mon, sec, min, hr)
		if at < startUnix {
			day = set.first()
			mon++
		}
	default:
		if v, ok := set.ceil(day); ok {
			t = day
			day = v
			if day > lastDayOfMonth(mon, c.get(year)) {
				day = set.first()
				mon++
			}
		} else {
			day = set.first()
			mon++
		}
	}
	if day != t || mon != tmon {
		c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, day, month, mon)
		return false
	}
	c.set(dayOfMonth, day)
	return true
}

// weekdayNear is the "W" rule on day of month mon in the calendar's year:
// Saturday moves to Friday (to Monday the 3rd from the 1st), Sunday to
// Monday (to Friday from the last day of the month). It returns the day and
// the instant of that day at the search's time of day. Like Quartz it works
// on a second calendar: the day of week read at midnight, the instant from
// the fields that reading resolved (a day 0 is the previous month's last).
//
// Quartz compares that instant with its start at millisecond precision,
// its calendar carrying the milliseconds of the clock; the caller compares
// whole seconds, which is what Quartz does for a start on a whole second.
func weekdayNear(c *calendar, day, mon, sec, min, hr int) (int, int64) {
	yr := c.get(year)
	tc := newCalendar(c.loc, 0)
	tc.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, day, month, mon, year, yr)
	last := lastDayOfMonth(mon, yr)
	switch dow := tc.weekday(); {
	case dow == 7 && day == 1:
		day += 2
	case dow == 7:
		day--
	case dow == 1 && day == last:
		day -= 2
	case dow == 1:
		day++
	}
	tc.setFields(second, sec, minute, min, hour, hr, dayOfMonth, day, month, mon)
	return day, tc.instant()
}

// dayOfWeek is the day step when day-of-week is set: "nL", "n#k", or a
// set of days.
func (e *Expression) dayOfWeek(c *calendar, day, mon int) bool {
	set := e.sets[dayOfWeek]
	cDow := c.weekday()
	last := lastDayOfMonth(mon, c.get(year))
	daysTo := func(dow int) int {
		switch {
		case cDow < dow:
			return dow - cDow
		case cDow > dow:
			return dow + 7 - cDow
		}
		return 0
	}
	nextMonth := func() bool {
		c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, 1, month, mon+1)
		return false
	}
	switch {
	case e.lastDayOfWeek:
		add := daysTo(set.first())
		if day+add > last {
			return nextMonth()
		}
		for day+add+7 <= last {
			add += 7
		}
		day += add
		if add > 0 {
			c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, day, month, mon)
			return false
		}
	case e.nthDayOfWeek != 0:
		add := daysTo(set.first())
		shifted := add > 0
		day += add
		week := day / 7
		if day%7 > 0 {
			week++
		}
		add = (e.nthDayOfWeek - week) * 7
		day += add
		if add < 0 || day > last {
			return nextMonth()
		}
		if add > 0 || shifted {
			c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, day, month, mon)
			return false
		}
	default:
		dow := set.first()
		if v, ok := set.ceil(cDow); ok {
			dow = v
		}
		add := daysTo(dow)
		if day+add > last {
			return nextMonth()
		}
		if add > 0 {
			c.setFields(second, 0, minute, 0, hour, 0, dayOfMonth, day+add, month, mon)
			return false
		}
	}
	c.set(dayOfMonth, day)
	return true
}

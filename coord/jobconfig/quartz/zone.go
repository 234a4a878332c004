package quartz

import "time"

// wallInstant returns the instant (Unix seconds) Java's calendar gives the
// wall-clock time wall (seconds since 1970-01-01 00:00 on the wall) in loc:
// the offset after the last transition whose own wall time, reckoned with
// that new offset, is not later than wall. A wall time in a spring-forward
// gap thus keeps the old offset (02:30 in New York becomes 03:30 EDT), and
// one in a fall-back overlap takes the new offset, the second occurrence.
// (Go's time.Date leaves both choices unspecified.)
func wallInstant(loc *time.Location, wall int64) int64 {
	// Offsets lie within +-26h, so transitions outside this window cannot
	// decide: the period in force at lo is the candidate to beat.
	const window = 26 * 3600
	lo, hi := wall-window, wall+window
	t := time.Unix(lo, 0).In(loc)
	_, off := t.Zone()
	for {
		_, end := t.ZoneBounds()
		if end.IsZero() || end.Unix() > hi {
			break
		}
		if !end.After(t) {
			// Past its tables Go marks each year's end as a bound, and in
			// leap years may return t itself: step over it. Real changes
			// are months apart, so an hour skips none.
			t = t.Add(time.Hour)
			continue
		}
		_, next := end.Zone()
		if end.Unix()+int64(next) <= wall {
			off = next
		}
		t = end
	}
	return wall - int64(off)
}

package jobconfig

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

const zoneFix = `name an IANA zone such as "Asia/Shanghai" or "America/New_York", "UTC", or an offset such as "GMT+08:00"; leave it empty for the process's local zone`

// LoadZone returns the time zone a job's TimeZone names: "" is the
// process's local zone (time.Local); an IANA name ("Asia/Shanghai"), "UTC"
// or "Local" as time.LoadLocation reads them; or a fixed offset written as
// Java's TimeZone takes it, "GMT+8", "GMT+08:00", "GMT-0530" (also with
// "UTC" in place of "GMT"). Unlike Java, which reads an unknown name as
// GMT, an unknown name is an error naming timeZone.
func LoadZone(name string) (*time.Location, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return time.Local, nil
	}
	if loc, ok := fixedZone(name); ok {
		return loc, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fieldErr(FieldTimeZone, zoneFix, "%q is not a time zone (%v)", name, err)
	}
	return loc, nil
}

// fixedZone reads Java's custom zone ids: GMT or UTC, a sign, hours (1-2
// digits), and optionally minutes, with or without a colon.
func fixedZone(name string) (*time.Location, bool) {
	var rest string
	switch {
	case strings.HasPrefix(name, "GMT"):
		rest = name[3:]
	case strings.HasPrefix(name, "UTC"):
		rest = name[3:]
	default:
		return nil, false
	}
	if len(rest) < 2 || (rest[0] != '+' && rest[0] != '-') {
		return nil, false
	}
	sign, digits := rest[0], rest[1:]
	var h, m string
	switch i := strings.IndexByte(digits, ':'); {
	case i >= 0:
		h, m = digits[:i], digits[i+1:]
		if len(m) != 2 {
			return nil, false
		}
	case len(digits) <= 2:
		h = digits
	case len(digits) == 4:
		h, m = digits[:2], digits[2:]
	default:
		return nil, false
	}
	hours, err := strconv.Atoi(h)
	if err != nil || len(h) == 0 || len(h) > 2 || hours > 23 || strings.ContainsAny(h, "+-") {
		return nil, false
	}
	mins := 0
	if m != "" {
		if mins, err = strconv.Atoi(m); err != nil || mins > 59 || strings.ContainsAny(m, "+-") {
			return nil, false
		}
	}
	off := hours*3600 + mins*60
	if sign == '-' {
		off = -off
	}
	return time.FixedZone(fmt.Sprintf("GMT%c%02d:%02d", sign, hours, mins), off), true
}

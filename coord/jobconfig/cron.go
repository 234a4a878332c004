package jobconfig

import (
	"strings"

	"github.com/robfig/cron/v3"
)

// cronParser reads six fields, seconds first, plus descriptors (@every 5s,
// @daily). Quartz forms are translated to it by ParseCron.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

const cronFix = `write six fields "second minute hour day-of-month month day-of-week" (an optional seventh year field must be "*"), e.g. "0/5 * * * * ?" (every 5 seconds) or "0 15 10 ? * MON-FRI" (10:15 on weekdays), or a descriptor such as "@every 1m"`

// ParseCron parses a job's cron expression into a schedule.
//
// It accepts the Quartz forms ElasticJob configs use: six fields with
// seconds first, "?" for "any" in day-of-month or day-of-week, and an
// optional seventh year field that must be "*". It also accepts
// robfig/cron descriptors ("@every 1s", "@hourly") and a leading
// "TZ=Area/City " or "CRON_TZ=Area/City " time zone.
//
// Quartz features robfig/cron cannot express are refused with an error
// naming them: "L" (last), "W" (nearest weekday) and "#" (nth weekday), and
// a year other than "*". Numeric day-of-week values are refused too, since
// Quartz counts 1=SUN..7=SAT and Unix cron 0=SUN..6=SAT: the same expression
// would silently run on another day; write names (MON-FRI) instead.
//
// Errors wrap ErrInvalid, name the cron field and show a valid example. The
// empty expression is an error here; Config.Validate allows an empty Cron
// (a job run only by triggers) and does not call ParseCron for it.
func ParseCron(expr string) (cron.Schedule, error) {
	spec, err := quartzToRobfig(expr)
	if err != nil {
		return nil, err
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fieldErr(FieldCron, cronFix, "%q does not parse: %v", expr, err)
	}
	return sched, nil
}

// quartzToRobfig rewrites a Quartz-style expression to robfig/cron's form,
// or explains which Quartz feature it cannot map.
func quartzToRobfig(expr string) (string, error) {
	s := strings.TrimSpace(expr)
	if s == "" {
		return "", fieldErr(FieldCron, cronFix, "expression is empty")
	}
	var tz string
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return "", fieldErr(FieldCron, cronFix, "%q has a time zone but no schedule", expr)
		}
		tz, s = s[:i]+" ", strings.TrimSpace(s[i:])
	}
	if strings.HasPrefix(s, "@") {
		return tz + s, nil
	}
	f := strings.Fields(s)
	switch len(f) {
	case 6:
	case 7:
		if f[6] != "*" {
			return "", fieldErr(FieldCron, cronFix, "%q: the year field %q is not supported, only \"*\"", expr, f[6])
		}
		f = f[:6]
	default:
		return "", fieldErr(FieldCron, cronFix, "%q has %d fields, want 6 (or 7 with a year)", expr, len(f))
	}
	names := [...]string{"second", "minute", "hour", "day-of-month", "month", "day-of-week"}
	for i, v := range f {
		if v == "?" {
			if i != 3 && i != 5 {
				return "", fieldErr(FieldCron, cronFix, "%q: \"?\" is only allowed in day-of-month or day-of-week, not in the %s field", expr, names[i])
			}
			f[i] = "*"
			continue
		}
		if strings.Contains(v, "?") {
			return "", fieldErr(FieldCron, cronFix, "%q: \"?\" must stand alone in the %s field", expr, names[i])
		}
	}
	dom, dow := strings.ToUpper(f[3]), strings.ToUpper(f[5])
	switch {
	case strings.Contains(dom, "L"):
		return "", fieldErr(FieldCron, cronFix, "%q: \"L\" (last day of month) in day-of-month is not supported", expr)
	case strings.Contains(dom, "W"):
		return "", fieldErr(FieldCron, cronFix, "%q: \"W\" (nearest weekday) in day-of-month is not supported", expr)
	case strings.Contains(dow, "#"):
		return "", fieldErr(FieldCron, cronFix, "%q: \"#\" (nth weekday of month) in day-of-week is not supported", expr)
	case strings.Contains(dow, "L"):
		return "", fieldErr(FieldCron, cronFix, "%q: \"L\" (last weekday of month) in day-of-week is not supported", expr)
	case strings.ContainsAny(stepless(dow), "0123456789"):
		return "", fieldErr(FieldCron, `use day names such as MON-FRI or SUN,SAT; `+cronFix,
			"%q: numeric day-of-week %q is ambiguous (Quartz counts 1=SUN..7=SAT, Unix cron 0=SUN..6=SAT)", expr, f[5])
	}
	return tz + strings.Join(f, " "), nil
}

// stepless drops "/step" suffixes from each comma-separated part of a field,
// so that "*/2" is not mistaken for a numeric day.
func stepless(field string) string {
	parts := strings.Split(field, ",")
	for i, p := range parts {
		if j := strings.IndexByte(p, '/'); j >= 0 {
			parts[i] = p[:j]
		}
	}
	return strings.Join(parts, ",")
}

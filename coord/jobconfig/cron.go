package jobconfig

import (
	"errors"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shardflow/shardflow/coord/jobconfig/quartz"
)

// descriptorParser reads the robfig/cron descriptors kept as extensions:
// "@every 10s", "@hourly", "@daily", "@weekly", "@monthly", "@yearly".
var descriptorParser = cron.NewParser(cron.Descriptor)

const cronFix = `write Quartz's six fields "second minute hour day-of-month month day-of-week" and an optional year, with "?" in one day field, e.g. "0/5 * * * * ?" (every 5 seconds) or "0 15 10 ? * MON-FRI" (10:15 on weekdays), or a descriptor such as "@every 1m"`

// ParseCron parses a job's cron expression into a schedule in the
// process's local time zone; see ParseCronIn.
func ParseCron(expr string) (cron.Schedule, error) { return ParseCronIn(expr, "") }

// ParseCronIn parses a job's cron expression into a schedule evaluated in
// the time zone zone names (see LoadZone; "" is the process's local zone).
//
// The expression is Quartz's, with Quartz's meaning exactly (package
// quartz): the same fields and special characters, the same quirks, the
// same refusals, the same fire times across daylight-saving changes.
// Two extensions are kept: robfig/cron descriptors ("@every 10s",
// "@daily"), and a leading "CRON_TZ=Zone " or "TZ=Zone " that overrides
// zone for this expression.
//
// Errors wrap ErrInvalid, name the cron field (or timeZone) and, for a
// Quartz refusal, the part of the expression and what is wrong with it.
// The empty expression is an error here; Config.Validate allows an empty
// Cron (a job run only by triggers) and does not call ParseCronIn for it.
func ParseCronIn(expr, zone string) (cron.Schedule, error) {
	s := strings.TrimSpace(expr)
	if s == "" {
		return nil, fieldErr(FieldCron, cronFix, "expression is empty")
	}
	if prefix, rest, ok := cutZonePrefix(s); ok {
		if rest == "" {
			return nil, fieldErr(FieldCron, cronFix, "%q has a time zone but no schedule", expr)
		}
		if _, err := LoadZone(prefix); err != nil {
			return nil, fieldErr(FieldCron, zoneFix, "%q: the CRON_TZ=/TZ= prefix names no time zone: %q", expr, prefix)
		}
		zone, s = prefix, rest
	}
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(s, "@") {
		sched, err := descriptorParser.Parse(s)
		if err != nil {
			return nil, fieldErr(FieldCron, cronFix, "%q does not parse: %v", expr, err)
		}
		if spec, ok := sched.(*cron.SpecSchedule); ok {
			spec.Location = loc
		}
		return sched, nil
	}
	sched, err := quartz.Parse(s, loc)
	if err != nil {
		var se *quartz.SyntaxError
		if errors.As(err, &se) && se.Field != "" {
			return nil, fieldErr(FieldCron, cronFix, "%q: %s field %q: %s", expr, se.Field, se.Value, se.Problem)
		}
		if se != nil {
			return nil, fieldErr(FieldCron, cronFix, "%q: %s", expr, se.Problem)
		}
		return nil, fieldErr(FieldCron, cronFix, "%q: %v", expr, err)
	}
	return sched, nil
}

// cutZonePrefix splits "CRON_TZ=Zone rest" or "TZ=Zone rest".
func cutZonePrefix(s string) (zone, rest string, ok bool) {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if strings.HasPrefix(s, p) {
			zone, rest, _ = strings.Cut(s[len(p):], " ")
			if z, r, found := strings.Cut(zone, "\t"); found {
				zone, rest = z, r+" "+rest
			}
			return zone, strings.TrimSpace(rest), true
		}
	}
	return "", "", false
}

// NextFireTimes returns up to n fire times of a job's cron expression
// after from, in the time zone zone names (as ParseCronIn reads both);
// fewer when the schedule ends. It is what `shardflow cron next` prints.
func NextFireTimes(expr, zone string, from time.Time, n int) ([]time.Time, error) {
	sched, err := ParseCronIn(expr, zone)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for t := from; len(out) < n; {
		next := sched.Next(t)
		if next.IsZero() {
			break
		}
		out = append(out, next)
		t = next
	}
	return out, nil
}

// CronSpec returns Cron with TimeZone as a "CRON_TZ=Zone " prefix, the one
// string the scheduler parses (ParseCron) to fire in the job's zone; Cron
// unchanged when TimeZone or Cron is empty or Cron names its own zone.
func (c Config) CronSpec() string {
	zone, expr := strings.TrimSpace(c.TimeZone), strings.TrimSpace(c.Cron)
	if zone == "" || expr == "" {
		return c.Cron
	}
	if _, _, prefixed := cutZonePrefix(expr); prefixed {
		return c.Cron
	}
	return "CRON_TZ=" + zone + " " + expr
}

package main

import (
	"strings"
	"testing"
)

func TestCronNext(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"quartz day-of-week and zone", []string{"cron", "next", "--tz", "UTC", "--from", "2026-03-04T10:00:02Z", "-n", "3", "0 15 10 ? * 2-6"},
			[]string{"2026-03-04T10:15:00Z", "2026-03-05T10:15:00Z", "2026-03-06T10:15:00Z"}},
		{"fields as separate arguments, flags after", []string{"cron", "next", "0", "0", "12", "L", "*", "?", "--tz", "UTC", "--from", "2026-01-01T00:00:00Z", "-n", "2"},
			[]string{"2026-01-31T12:00:00Z", "2026-02-28T12:00:00Z"}},
		{"once on the night clocks go back", []string{"cron", "next", "--tz", "America/New_York", "--from", "2025-11-01T00:00:00-04:00", "-n", "3", "0 0 1 * * ?"},
			[]string{"2025-11-01T01:00:00-04:00", "2025-11-02T01:00:00-05:00", "2025-11-03T01:00:00-05:00"}},
		{"a year that ends", []string{"cron", "next", "--tz", "UTC", "--from", "2026-01-01T00:00:00Z", "-n", "5", "0 0 12 1 JAN ? 2027-2028"},
			[]string{"2027-01-01T12:00:00Z", "2028-01-01T12:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("got\n%s\nwant\n%s", out, strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestCronNextRefusals(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		phrase string
	}{
		{[]string{"cron", "next", "0 0 12 ? * MON#6"}, 1, `day-of-week field "MON#6"`},
		{[]string{"cron", "next", "0 0/60 * * * ?"}, 1, `minute field "0/60": step 60 is larger than the field`},
		{[]string{"cron", "next", "0 0 12 1 * MON"}, 1, "both day-of-month and day-of-week are set"},
		{[]string{"cron", "next", "--tz", "Mars/Olympus", "0 0 12 * * ?"}, 1, "timeZone"},
		{[]string{"cron", "next", "--from", "yesterday", "0 0 12 * * ?"}, 2, "RFC 3339"},
		{[]string{"cron", "next", "-n", "0", "0 0 12 * * ?"}, 2, "-n must be > 0"},
		{[]string{"cron", "next"}, 2, "give the cron expression"},
		{[]string{"cron"}, 2, "usage: shardflow cron next"},
	}
	for _, tt := range tests {
		_, errOut, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.phrase) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tt.args, code, errOut, tt.code, tt.phrase)
		}
	}
}

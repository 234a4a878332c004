package jobconfig

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseCron(t *testing.T) {
	base := time.Date(2026, 3, 4, 10, 0, 2, 0, time.UTC) // a Wednesday
	tests := []struct {
		expr string
		next time.Time // the first fire time after base
	}{
		{"0/5 * * * * ?", time.Date(2026, 3, 4, 10, 0, 5, 0, time.UTC)},
		{"0 15 10 ? * MON-FRI", time.Date(2026, 3, 4, 10, 15, 0, 0, time.UTC)},
		{"0 15 10 ? * SAT,SUN", time.Date(2026, 3, 7, 10, 15, 0, 0, time.UTC)},
		{"0 0 12 1 * ?", time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)},
		{"0 0 0 * * ? *", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)},
		{"  0/5   * * * * ?  ", time.Date(2026, 3, 4, 10, 0, 5, 0, time.UTC)},
		{"0 0 12 ? JUL *", time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)},
		{"0 0 12 ? * 2-6", time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)},       // Quartz: 2=MON..6=FRI
		{"0 0 12 ? * 1", time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)},         // 1 = Sunday
		{"0 0 12 ? * MON/2", time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)},     // step ignored: Mondays
		{"0 0 12 L * ?", time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)},        // last day
		{"0 0 12 L-2 * ?", time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC)},      // two before the last
		{"0 0 12 LW * ?", time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)},       // Tuesday the 31st
		{"0 0 12 14W * ?", time.Date(2026, 3, 13, 12, 0, 0, 0, time.UTC)},      // Sat 14th -> Fri 13th
		{"0 0 12 ? * 6L", time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)},       // last Friday
		{"0 0 12 ? * 6#3", time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)},      // third Friday
		{"0 0 12 ? * FRI-MON", time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)},   // wraps: Fri..Mon
		{"0 0 12 1 NOV-FEB ?", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)},  // wraps: Nov..Feb
		{"0 0 22-2 * * ?", time.Date(2026, 3, 4, 22, 0, 0, 0, time.UTC)},       // wraps: 22..2
		{"0 0 12 1 1 ? 2028", time.Date(2028, 1, 1, 12, 0, 0, 0, time.UTC)},    // a year
		{"0 0 12 ? * MON-FRI/2", time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)}, // step ignored
		{"@every 1s", time.Date(2026, 3, 4, 10, 0, 3, 0, time.UTC)},            // extension
		{"@hourly", time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},              // extension
		{"TZ=UTC 0 0 11 * * ?", time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},  // extension
		{"CRON_TZ=GMT+01:00 0 0 12 * * ?", time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		s, err := ParseCronIn(tt.expr, "UTC")
		if err != nil {
			t.Errorf("ParseCron(%q): %v", tt.expr, err)
			continue
		}
		if got := s.Next(base); !got.Equal(tt.next) {
			t.Errorf("ParseCron(%q).Next(%v) = %v, want %v", tt.expr, base, got, tt.next)
		}
	}
}

func TestParseCronErrors(t *testing.T) {
	tests := []struct{ expr, phrase string }{
		{"", "empty"},
		{"* * * * *", "5 fields, want 6"},
		{"? * * * * ?", `second field "?": "?" is only allowed in day-of-month or day-of-week`},
		{"0 0 12 1 * MON", "both day-of-month and day-of-week are set"},
		{"0 0 12 ? * ?", `"?" in both day fields`},
		{"0 0/60 * * * ?", `minute field "0/60": step 60 is larger than the field: at most 59`},
		{"0 0 25 * * ?", `hour field "25": values must be 0-23`},
		{"0 0 0 * FOO ?", `month field "FOO": "FOO" is not a month`},
		{"0 0 12 ? * MON#6", `day-of-week field "MON#6": "#" must be followed by a number 1-5`},
		{"0 0 12 L-31 * ?", `day-of-month field "L-31": the offset from the last day must be at most 30`},
		{"0 0 12 5L * ?", `day-of-month field "5L": "L" after a number is only allowed in day-of-week`},
		{"0 0 12 ? * 8", `day-of-week field "8": values must be 1-7`},
		{"0 0 12 ? * 0", `day-of-week field "0": values must be 1-7`},
		{"0 0 12 ? * 1#1,2#2", `only one "#"`},
		{"0 0 0 ? * * 2030-2025", `year field "2030-2025": the range ends before it starts`},
		{"L * * * * ?", `second field "L": selects no value`},
		{"@sometimes", "does not parse"},
		{"TZ=UTC", "no schedule"},
	}
	for _, tt := range tests {
		_, err := ParseCron(tt.expr)
		if err == nil {
			t.Errorf("ParseCron(%q) succeeded, want an error containing %q", tt.expr, tt.phrase)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(msg, tt.phrase) ||
			!strings.HasPrefix(msg, "jobconfig: cron: ") || !strings.Contains(msg, `"0/5 * * * * ?"`) {
			t.Errorf("ParseCron(%q) error = %q; want ErrInvalid naming cron, %q and an example", tt.expr, msg, tt.phrase)
		}
	}
	_, err := ParseCron("TZ=Nowhere/City 0 * * * * ?")
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "jobconfig: cron: ") || !strings.Contains(err.Error(), `"Nowhere/City"`) {
		t.Errorf("an unknown zone prefix: %v, want an error naming cron and the zone", err)
	}
	_, err = ParseCronIn("0 * * * * ?", "Nowhere/City")
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "jobconfig: timeZone: ") {
		t.Errorf("an unknown timeZone: %v, want an error naming timeZone", err)
	}
}

// TestCronDaylightSaving pins Quartz's daylight-saving behaviour (checked
// against Quartz itself by quartz.TestMatchesQuartz): once in the repeated
// hour, at its second (standard-time) occurrence; a time in the skipped
// hour skipped that day.
func TestCronDaylightSaving(t *testing.T) {
	ny, err := LoadZone("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		expr string
		from time.Time
		want []string
	}{
		{"0 0 1 * * ?", time.Date(2025, 11, 1, 0, 0, 0, 0, ny),
			[]string{"2025-11-01T01:00:00-04:00", "2025-11-02T01:00:00-05:00", "2025-11-03T01:00:00-05:00"}},
		{"0 30 2 * * ?", time.Date(2025, 3, 8, 0, 0, 0, 0, ny),
			[]string{"2025-03-08T02:30:00-05:00", "2025-03-10T02:30:00-04:00", "2025-03-11T02:30:00-04:00"}},
		{"0 30 * * * ?", time.Date(2025, 11, 2, 0, 0, 0, 0, ny),
			[]string{"2025-11-02T00:30:00-04:00", "2025-11-02T01:30:00-05:00", "2025-11-02T02:30:00-05:00"}},
	}
	for _, tt := range tests {
		got, err := NextFireTimes(tt.expr, "America/New_York", tt.from, len(tt.want))
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, g := range got {
			s = append(s, g.Format(time.RFC3339))
		}
		if strings.Join(s, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%q from %v:\n got %v\nwant %v", tt.expr, tt.from, s, tt.want)
		}
	}
}

func TestLoadZone(t *testing.T) {
	for name, offset := range map[string]int{"UTC": 0, "GMT+8": 8 * 3600, "GMT+08:00": 8 * 3600, "GMT-0530": -(5*3600 + 30*60), "UTC+05:45": 5*3600 + 45*60} {
		loc, err := LoadZone(name)
		if err != nil {
			t.Errorf("LoadZone(%q): %v", name, err)
			continue
		}
		if _, off := time.Date(2025, 1, 1, 0, 0, 0, 0, loc).Zone(); off != offset {
			t.Errorf("LoadZone(%q) offset %d, want %d", name, off, offset)
		}
	}
	if loc, err := LoadZone(""); err != nil || loc != time.Local {
		t.Errorf(`LoadZone("") = %v, %v; want time.Local`, loc, err)
	}
	for _, bad := range []string{"Mars/Olympus", "GMT+25", "GMT+8:5", "GMT8"} {
		if _, err := LoadZone(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "timeZone") {
			t.Errorf("LoadZone(%q) = %v, want an error naming timeZone", bad, err)
		}
	}
}

func TestCronSpecCarriesTheZone(t *testing.T) {
	c := Config{Cron: "0 0 12 * * ?", TimeZone: "Asia/Shanghai"}
	if got := c.CronSpec(); got != "CRON_TZ=Asia/Shanghai 0 0 12 * * ?" {
		t.Fatalf("CronSpec() = %q", got)
	}
	s, err := ParseCron(c.CronSpec())
	if err != nil {
		t.Fatal(err)
	}
	got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 1, 1, 4, 0, 0, 0, time.UTC); !got.Equal(want) { // 12:00 at UTC+8
		t.Fatalf("Next = %v, want %v", got, want)
	}
	for _, c := range []Config{{Cron: "0 0 12 * * ?"}, {TimeZone: "UTC"}} {
		if got := c.CronSpec(); got != c.Cron {
			t.Errorf("CronSpec() of %+v = %q, want Cron unchanged", c, got)
		}
	}
}

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
		{"*/1 * * * * *", time.Date(2026, 3, 4, 10, 0, 3, 0, time.UTC)},
		{"0 0 0 * * ? *", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)},
		{"  0/5   * * * * ?  ", time.Date(2026, 3, 4, 10, 0, 5, 0, time.UTC)},
		{"0 0 12 ? JUL *", time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)},
		{"0 0 12 ? * */2", time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)}, // Sun, Tue, Thu, Sat
		{"@every 1s", time.Date(2026, 3, 4, 10, 0, 3, 0, time.UTC)},
		{"@hourly", time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},
		{"TZ=UTC 0 0 11 * * ?", time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		s, err := ParseCron(tt.expr)
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
		{"* * * * *", "has 5 fields"},
		{"0 0 0 * * ? 2027", `year field "2027" is not supported`},
		{"0 0 0 * * ? * *", "has 8 fields"},
		{"? * * * * *", `"?" is only allowed in day-of-month or day-of-week`},
		{"0 0 0 1? * *", `"?" must stand alone`},
		{"0 0 0 L * ?", `"L" (last day of month)`},
		{"0 0 0 15W * ?", `"W" (nearest weekday)`},
		{"0 0 0 ? * 6#3", `"#" (nth weekday of month)`},
		{"0 0 0 ? * 5L", `"L" (last weekday of month)`},
		{"0 0 0 ? * 2-6", "numeric day-of-week"},
		{"0 0 25 * * ?", "does not parse"},
		{"0 0 0 * FOO ?", "does not parse"},
		{"@sometimes", "does not parse"},
		{"TZ=UTC", "no schedule"},
		{"TZ=Nowhere/City 0 * * * * ?", "does not parse"},
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
}

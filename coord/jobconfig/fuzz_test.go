package jobconfig

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseItemParameters: never panics; errors wrap ErrInvalid; a parsed
// map has items in range and re-encodes to a string that parses back to it.
func FuzzParseItemParameters(f *testing.F) {
	f.Add("0=Beijing,1=Shanghai,2=Guangzhou", 3)
	f.Add("0=a=b", 3)
	f.Add(" 1 = , 0=x ,", 2)
	f.Fuzz(func(t *testing.T, s string, total int) {
		m, err := ParseItemParameters(s, total)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var pairs []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k < 0 || (total > 0 && k >= total) {
				t.Fatalf("item %d out of range for total %d", k, total)
			}
			pairs = append(pairs, strconv.Itoa(k)+"="+m[k])
		}
		again, err := ParseItemParameters(strings.Join(pairs, ","), total)
		if err != nil || !maps.Equal(again, m) {
			t.Fatalf("re-encoded %q parsed to %v, %v; want %v", strings.Join(pairs, ","), again, err, m)
		}
	})
}

// FuzzParseCron: never panics; errors wrap ErrInvalid and name the cron
// field; a schedule's next fire time is after the time asked about.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0/5 * * * * ?", "0 15 10 ? * MON-FRI", "*/1 * * * * *", "@every 1s", "0 0 0 L * ?", "0 0 0 * * ? *", "0 0 12 ? * 6#3", "0 0 12 LW * ?", "0 0 22-2 ? NOV-FEB FRI-MON/2 2025/2"} {
		f.Add(s)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := ParseCron(expr)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "jobconfig: cron: ") {
				t.Fatalf("error %q does not wrap ErrInvalid naming cron", err)
			}
			return
		}
		if next := s.Next(base); !next.IsZero() && !next.After(base) {
			t.Fatalf("%q: Next(%v) = %v, not after", expr, base, next)
		}
	})
}

// FuzzFromFields: decoding arbitrary node values never panics; whatever
// decodes re-encodes with Fields and decodes to the same Config.
func FuzzFromFields(f *testing.F) {
	f.Add("0/5 * * * * ?", "3", "0=a,1=b", "true", "0", "average", "log", "DATAFLOW")
	f.Add("", "abc", "", "yes", "-1", "", "", "")
	f.Add("x", "+7", "9=z", "0", "12", "round-robin", "throw", "SIMPLE")
	f.Fuzz(func(t *testing.T, cron, total, params, monitor, threads, strategy, policy, jobType string) {
		m := map[string]string{
			FieldCron: cron, FieldShardingTotalCount: total, FieldShardingItemParameters: params,
			FieldMonitorExecution: monitor, FieldConcurrentDataProcessThreadCount: threads,
			FieldJobShardingStrategy: strategy, FieldErrorPolicy: policy,
		}
		if jobType != "" {
			m[FieldJobType] = jobType
		}
		c, err := FromFields("fuzz", m)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || len(FieldErrors(err)) == 0 {
				t.Fatalf("error %v does not wrap ErrInvalid with field errors", err)
			}
			return
		}
		_ = c.Validate() // must not panic, valid or not
		again, err := FromFields("fuzz", c.Fields())
		if err != nil {
			t.Fatalf("re-decoding %v: %v", c.Fields(), err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, again)
		}
	})
}

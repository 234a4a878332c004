package jobconfig

import (
	"fmt"
	"time"
)

// validateIntervals checks the duration fields stored as whole seconds
// (c has its defaults): the two intervals at least a second, every one a
// whole number of seconds, since the stored form (ElasticJob's) would
// round a fraction away.
func (c Config) validateIntervals() []error {
	var errs []error
	for _, f := range []struct {
		name  string
		value time.Duration
		min   time.Duration
		def   string
	}{
		{FieldProcessCountIntervalSeconds, c.ProcessCountInterval, time.Second, DefaultProcessCountInterval.String()},
		{FieldReconcileIntervalSeconds, c.ReconcileInterval, time.Second, DefaultReconcileInterval.String()},
		{FieldMaxTimeDiffSeconds, c.MaxTimeDiff, 0, "0 (no check)"},
	} {
		switch {
		case f.min > 0 && f.value < f.min:
			errs = append(errs, fieldErr(f.name, "set at least 1s, or 0 for the default "+f.def, "must be >= 1s, got %s", f.value))
		case f.value%time.Second != 0:
			errs = append(errs, fieldErr(f.name, fmt.Sprintf("use whole seconds, e.g. %s", f.value.Truncate(time.Second)+time.Second), "is stored in whole seconds, got %s", f.value))
		}
	}
	return errs
}

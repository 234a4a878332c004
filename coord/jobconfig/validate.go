package jobconfig

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardflow/shardflow/coord/sharding"
)

// MaxJobNameLen is the longest job name accepted, in bytes.
const MaxJobNameLen = 128

// ValidateJobName checks a job name: 1 to 128 bytes of ASCII letters,
// digits, '-', '_' and '.', and not "." or "..", since the name is a node of
// the coordination tree. The error wraps ErrInvalid and names jobName.
func ValidateJobName(name string) error {
	const fix = `use 1-128 letters, digits, '-', '_' or '.', e.g. "order-sync"`
	switch {
	case name == "":
		return fieldErr(FieldJobName, fix, "is empty")
	case len(name) > MaxJobNameLen:
		return fieldErr(FieldJobName, fix, "is %d bytes long, over %d", len(name), MaxJobNameLen)
	case name == "." || name == "..":
		return fieldErr(FieldJobName, fix, "%q is a relative path element", name)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.') {
			return fieldErr(FieldJobName, fix, "%q has the character %q at byte %d", name, rune(b), i)
		}
	}
	return nil
}

// ValidErrorPolicy reports whether p is one of the defined error policies.
func ValidErrorPolicy(p ErrorPolicy) bool {
	switch p {
	case ErrorPolicyLog, ErrorPolicyReturn, ErrorPolicyIgnore:
		return true
	}
	return false
}

// Validate reports every problem of c, each as a *FieldError naming the
// config-node field and the fix, joined with errors.Join; every one wraps
// ErrInvalid. It returns nil for a valid config.
//
// Validate checks c.WithDefaults(): a zero field that has a default is
// fine, an explicit negative one is an error. It checks: the job name
// (ValidateJobName); shardingTotalCount > 0; the sizes of the fields
// (MaxShardingTotalCount, MaxParameterBytes, MaxHTTPHeadersBytes,
// MaxTextBytes); the time zone (LoadZone);
// the cron expression (ParseCronIn, in that zone) unless it is empty, and
// not naming a zone of its own when timeZone does; the item parameters (ParseItemParameters against the
// total); processCountIntervalSeconds and reconcileIntervalSeconds whole
// seconds >= 1s, maxTimeDiffSeconds whole seconds;
// concurrentDataProcessThreadCount and fetchDataCount > 0; jobShardingStrategy
// registered in package sharding; errorPolicy one of log, return, ignore;
// jobType known, streamingProcess only for DATAFLOW jobs, itemTimeout >= 0,
// a SCRIPT job's scriptCommandLine (SplitCommandLine), an HTTP job's
// httpUrl, httpMethod and httpHeaders.
// Strategies registered later than the call are not known to it.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if err := ValidateJobName(c.JobName); err != nil {
		errs = append(errs, err)
	}
	if c.ShardingTotalCount <= 0 {
		errs = append(errs, fieldErr(FieldShardingTotalCount, "set it to the number of shard items, e.g. 8", "must be > 0, got %d", c.ShardingTotalCount))
	}
	_, zoneErr := LoadZone(c.TimeZone)
	if zoneErr != nil {
		errs = append(errs, zoneErr)
	}
	if _, _, prefixed := cutZonePrefix(strings.TrimSpace(c.Cron)); prefixed && strings.TrimSpace(c.TimeZone) != "" {
		errs = append(errs, fieldErr(FieldCron, "drop the CRON_TZ=/TZ= prefix from cron and keep the zone in timeZone",
			"%q names a time zone and so does timeZone (%q)", c.Cron, c.TimeZone))
	} else if strings.TrimSpace(c.Cron) != "" && zoneErr == nil {
		if _, err := ParseCronIn(c.Cron, c.TimeZone); err != nil {
			errs = append(errs, err)
		}
	}
	sizeErrs := c.validateSizes()
	errs = append(errs, sizeErrs...)
	if len(sizeErrs) == 0 { // an oversized value is not parsed
		if _, err := ParseItemParameters(c.ShardingItemParameters, c.ShardingTotalCount); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.validateIntervals()...)
	for _, f := range []struct {
		name  string
		value int
		def   string
	}{
		{FieldConcurrentDataProcessThreadCount, c.ConcurrentDataProcessThreadCount, "2 x GOMAXPROCS"},
		{FieldFetchDataCount, c.FetchDataCount, fmt.Sprint(DefaultFetchDataCount)},
	} {
		if f.value <= 0 {
			errs = append(errs, fieldErr(f.name, "set a positive number, or 0 for the default "+f.def, "must be > 0, got %d", f.value))
		}
	}
	if _, err := sharding.Lookup(c.ShardingStrategy); err != nil {
		errs = append(errs, fieldErr(FieldJobShardingStrategy,
			"use one of "+strings.Join(sharding.Names(), ", ")+", or register the strategy with sharding.Register first",
			"%q is not a registered strategy", c.ShardingStrategy))
	}
	if !ValidErrorPolicy(c.ErrorPolicy) {
		errs = append(errs, fieldErr(FieldErrorPolicy, `use "log", "return" or "ignore"`, "%q is not an error policy", c.ErrorPolicy))
	}
	errs = append(errs, c.validateJobType()...)
	errs = append(errs, c.validateDependsOn()...)
	return errors.Join(errs...)
}

// validateDependsOn checks what dependsOn and upstreamFailure say on
// their own: names of jobs, none twice, not the job itself, and no cron
// beside them. That the named jobs exist and make no cycle is checked
// against the namespace where the config is stored (coord/workflow).
func (c Config) validateDependsOn() []error {
	var errs []error
	switch c.UpstreamFailure {
	case "", UpstreamFailureStop, UpstreamFailureRun:
	default:
		errs = append(errs, fieldErr(FieldUpstreamFailure, `use "stop" (the default: skip this job when an upstream step failed) or "run"`,
			"%q is not an upstream failure policy", c.UpstreamFailure))
	}
	if len(c.DependsOn) == 0 {
		return errs
	}
	if n := len(strings.Join(c.DependsOn, ",")); n > MaxTextBytes {
		return append(errs, fieldErr(FieldDependsOn, fmt.Sprintf("keep it to at most %d bytes (MaxTextBytes)", MaxTextBytes),
			"is %d bytes, over the limit of %d", n, MaxTextBytes))
	}
	seen := make(map[string]bool, len(c.DependsOn))
	for _, up := range c.DependsOn {
		if err := ValidateJobName(up); err != nil {
			errs = append(errs, fieldErr(FieldDependsOn, "name jobs of this namespace, separated by commas, e.g. \"extract,load\"",
				"%q is not a job name", up))
			continue
		}
		switch {
		case up == c.JobName:
			errs = append(errs, fieldErr(FieldDependsOn, "remove "+up+" from dependsOn", "names the job itself (%s)", up))
		case seen[up]:
			errs = append(errs, fieldErr(FieldDependsOn, "name each job once", "names %s twice", up))
		}
		seen[up] = true
	}
	if strings.TrimSpace(c.Cron) != "" {
		errs = append(errs, fieldErr(FieldCron,
			"clear cron (a job with dependsOn runs when its upstream jobs complete) or clear dependsOn",
			"%q is set and so is dependsOn (%s): a job runs either on a cron or after other jobs, not both", c.Cron, strings.Join(c.DependsOn, ",")))
	}
	return errs
}

// StopsOnUpstreamFailure reports whether the job is skipped in a workflow
// run whose upstream step failed (UpstreamFailure "stop" or unset).
func (c Config) StopsOnUpstreamFailure() bool { return c.UpstreamFailure != UpstreamFailureRun }

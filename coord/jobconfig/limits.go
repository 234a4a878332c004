package jobconfig

import "fmt"

// Limits on a job's size. A config beyond them is refused by Validate with
// the limit named: one oversized job must not exhaust a worker, a console
// or the coordination service (a ZooKeeper node holds at most 1 MiB, and a
// server's share of the items is one node).
const (
	// MaxShardingTotalCount is the largest shardingTotalCount: the most
	// shard items the coordination layout is tested with.
	MaxShardingTotalCount = 10_000
	// MaxParameterBytes bounds shardingItemParameters and jobParameter.
	MaxParameterBytes = 64 << 10
	// MaxHTTPHeadersBytes bounds httpHeaders.
	MaxHTTPHeadersBytes = 8 << 10
	// MaxTextBytes bounds the other text fields: cron, timeZone,
	// description, scriptCommandLine, httpUrl, httpMethod,
	// jobShardingStrategy.
	MaxTextBytes = 8 << 10
	// MaxStoredJobs is the most jobs one namespace holds: CreateJob
	// refuses another.
	MaxStoredJobs = 10_000
)

// validateSizes reports the fields of c over their limits.
func (c Config) validateSizes() []error {
	var errs []error
	if c.ShardingTotalCount > MaxShardingTotalCount {
		errs = append(errs, fieldErr(FieldShardingTotalCount,
			fmt.Sprintf("use at most %d shard items (MaxShardingTotalCount); give each item more data instead", MaxShardingTotalCount),
			"%d is over the limit of %d", c.ShardingTotalCount, MaxShardingTotalCount))
	}
	for _, f := range []struct {
		name  string
		value string
		max   int
		what  string
	}{
		{FieldShardingItemParameters, c.ShardingItemParameters, MaxParameterBytes, "MaxParameterBytes"},
		{FieldJobParameter, c.JobParameter, MaxParameterBytes, "MaxParameterBytes"},
		{FieldHTTPHeaders, c.HTTP.Headers, MaxHTTPHeadersBytes, "MaxHTTPHeadersBytes"},
		{FieldCron, c.Cron, MaxTextBytes, "MaxTextBytes"},
		{FieldTimeZone, c.TimeZone, MaxTextBytes, "MaxTextBytes"},
		{FieldDescription, c.Description, MaxTextBytes, "MaxTextBytes"},
		{FieldScriptCommandLine, c.Script.CommandLine, MaxTextBytes, "MaxTextBytes"},
		{FieldHTTPURL, c.HTTP.URL, MaxTextBytes, "MaxTextBytes"},
		{FieldHTTPMethod, c.HTTP.Method, MaxTextBytes, "MaxTextBytes"},
		{FieldJobShardingStrategy, c.ShardingStrategy, MaxTextBytes, "MaxTextBytes"},
	} {
		if len(f.value) > f.max {
			errs = append(errs, fieldErr(f.name, fmt.Sprintf("keep it to at most %d bytes (%s); pass bulk data through the job's source", f.max, f.what),
				"is %d bytes, over the limit of %d", len(f.value), f.max))
		}
	}
	return errs
}

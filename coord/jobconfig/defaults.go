package jobconfig

import (
	"runtime"

	"github.com/shardflow/shardflow/coord/sharding"
)

// Defaults of the fields whose zero value means "use the default".
const (
	DefaultProcessCountIntervalSeconds = 300
	DefaultFetchDataCount              = 1
	DefaultShardingStrategy            = sharding.NameAverage
	DefaultErrorPolicy                 = ErrorPolicyLog
	DefaultReconcileIntervalSeconds    = 60
)

// DefaultConcurrentDataProcessThreadCount returns the default worker count,
// 2 x GOMAXPROCS, as read when it is called.
func DefaultConcurrentDataProcessThreadCount() int { return 2 * runtime.GOMAXPROCS(0) }

// WithDefaults returns a copy of c with every zero field that has a default
// set to it: ProcessCountIntervalSeconds 300, ConcurrentDataProcessThreadCount
// 2 x GOMAXPROCS, FetchDataCount 1, ShardingStrategy "average", ErrorPolicy
// "log", ReconcileIntervalSeconds 60, JobType DATAFLOW, an HTTP job's
// HTTPMethod POST, and nil MonitorExecution and Misfire to pointers to true. Negative values are kept, for Validate to report.
// The pointers of c are not shared with the copy.
func (c Config) WithDefaults() Config {
	if c.ProcessCountIntervalSeconds == 0 {
		c.ProcessCountIntervalSeconds = DefaultProcessCountIntervalSeconds
	}
	if c.ConcurrentDataProcessThreadCount == 0 {
		c.ConcurrentDataProcessThreadCount = DefaultConcurrentDataProcessThreadCount()
	}
	if c.FetchDataCount == 0 {
		c.FetchDataCount = DefaultFetchDataCount
	}
	if c.ShardingStrategy == "" {
		c.ShardingStrategy = DefaultShardingStrategy
	}
	if c.ErrorPolicy == "" {
		c.ErrorPolicy = DefaultErrorPolicy
	}
	if c.ReconcileIntervalSeconds == 0 {
		c.ReconcileIntervalSeconds = DefaultReconcileIntervalSeconds
	}
	c.JobType = c.Type()
	if c.JobType == JobTypeHTTP && c.HTTPMethod == "" {
		c.HTTPMethod = DefaultHTTPMethod
	}
	c.MonitorExecution = Bool(c.MonitorsExecution())
	c.Misfire = Bool(c.MisfireEnabled())
	return c
}

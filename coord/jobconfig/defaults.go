package jobconfig

import (
	"runtime"
	"time"

	"github.com/shardflow/shardflow/coord/sharding"
)

// Defaults of the fields whose zero value means "use the default".
const (
	DefaultProcessCountInterval = 5 * time.Minute
	DefaultFetchDataCount       = 1
	DefaultShardingStrategy     = sharding.NameAverage
	DefaultErrorPolicy          = ErrorPolicyLog
	DefaultReconcileInterval    = time.Minute
)

// DefaultConcurrentDataProcessThreadCount returns the default worker count,
// 2 x GOMAXPROCS, as read when it is called.
func DefaultConcurrentDataProcessThreadCount() int { return 2 * runtime.GOMAXPROCS(0) }

// WithDefaults returns a copy of c with every zero field that has a default
// set to it: ProcessCountInterval 5m, ConcurrentDataProcessThreadCount
// 2 x GOMAXPROCS, FetchDataCount 1, ShardingStrategy "average", ErrorPolicy
// "log", ReconcileInterval 1m, JobType DATAFLOW and an HTTP job's
// HTTP.Method POST. Negative values are kept, for Validate to report.
func (c Config) WithDefaults() Config {
	if c.ProcessCountInterval == 0 {
		c.ProcessCountInterval = DefaultProcessCountInterval
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
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	c.JobType = c.Type()
	if c.JobType == JobTypeHTTP && c.HTTP.Method == "" {
		c.HTTP.Method = DefaultHTTPMethod
	}
	return c
}

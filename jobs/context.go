// Package jobs runs jobs without code: SCRIPT jobs (a command per owned
// shard item) and HTTP jobs (a request per owned shard item), configured
// entirely in the coordination store, and the Worker that runs every such
// stored job of a namespace on a dataflow.Node (what `shardflow serve` is),
// picking up added jobs and dropping removed ones without a restart.
//
// Both job types are dataflow.SimpleFunc adapters: they run through the
// Node's per-item pipeline like any simple job, so they are coordinated,
// fenced (ownership loss cancels the item: a script's process group is
// killed), counted, listened to and bounded by itemTimeout the same way.
//
// Security: a command or URL stored in the namespace runs on every worker
// of it, so a Worker runs only commands and URLs its AllowList permits, and
// reports a refused job in the job's status. Whoever can write the
// namespace can run any allowed command: protect it with digest ACLs
// (docs/operations.md).
package jobs

import (
	"encoding/json"
	"strconv"

	"github.com/shardflow/shardflow/dataflow"
)

// ShardContext is the shard context a SCRIPT job gets as JSON in its last
// argument (and, field by field, in SHARDFLOW_* environment variables) and
// an HTTP job gets as its request body. The JSON names follow ElasticJob's
// ShardingContext where it has one.
type ShardContext struct {
	JobName            string `json:"jobName"`
	ShardingItem       int    `json:"shardingItem"`
	ShardingTotalCount int    `json:"shardingTotalCount"`
	ShardingParameter  string `json:"shardingParameter"`
	JobParameter       string `json:"jobParameter"`
	// Epoch is the item's fencing epoch (dataflow.Shard.Epoch): store it
	// with side effects to refuse a stale owner's writes.
	Epoch    int64  `json:"epoch"`
	ServerID string `json:"serverId"`
	Failover bool   `json:"failover"`
	// WorkflowRun is the workflow run the item's run serves
	// (dataflow.Shard.WorkflowRun); absent for a job in no workflow.
	WorkflowRun string `json:"workflowRun,omitempty"`
}

// NewShardContext is the context of shard, run by the server shard.ServerID.
func NewShardContext(shard dataflow.Shard) ShardContext {
	return ShardContext{
		JobName: shard.JobName, ShardingItem: shard.Item, ShardingTotalCount: shard.Total,
		ShardingParameter: shard.ItemParameter, JobParameter: shard.JobParameter,
		Epoch: shard.Epoch, ServerID: shard.ServerID, Failover: shard.Failover, WorkflowRun: shard.WorkflowRun,
	}
}

// JSON encodes c.
func (c ShardContext) JSON() []byte {
	b, _ := json.Marshal(c) // strings, numbers and a bool: cannot fail
	return b
}

// Env returns c as environment entries: SHARDFLOW_JOB, SHARDFLOW_ITEM,
// SHARDFLOW_TOTAL, SHARDFLOW_ITEM_PARAMETER, SHARDFLOW_JOB_PARAMETER,
// SHARDFLOW_EPOCH, SHARDFLOW_SERVER_ID and SHARDFLOW_FAILOVER, and
// SHARDFLOW_WORKFLOW_RUN for an item run in a workflow run.
func (c ShardContext) Env() []string {
	env := []string{
		"SHARDFLOW_JOB=" + c.JobName,
		"SHARDFLOW_ITEM=" + strconv.Itoa(c.ShardingItem),
		"SHARDFLOW_TOTAL=" + strconv.Itoa(c.ShardingTotalCount),
		"SHARDFLOW_ITEM_PARAMETER=" + c.ShardingParameter,
		"SHARDFLOW_JOB_PARAMETER=" + c.JobParameter,
		"SHARDFLOW_EPOCH=" + strconv.FormatInt(c.Epoch, 10),
		"SHARDFLOW_SERVER_ID=" + c.ServerID,
		"SHARDFLOW_FAILOVER=" + strconv.FormatBool(c.Failover),
	}
	if c.WorkflowRun != "" {
		env = append(env, "SHARDFLOW_WORKFLOW_RUN="+c.WorkflowRun)
	}
	return env
}

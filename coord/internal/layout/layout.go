// Package layout is the node layout of a job in the coordination store
// (docs/zookeeper-layout.md) and the codecs of its stored records, shared by
// the protocol (coord/protocol) and the operator API (coord).
package layout

import (
	"strconv"

	"github.com/shardflow/shardflow/coord/store"
)

// Node names of the layout (docs/zookeeper-layout.md). Paths relative to the
// job root are used by the tree cache; jobPaths builds absolute ones.
const (
	NConfig     = "config"
	NServers    = "servers"
	NExecution  = "execution"
	NLeader     = "leader"
	NGuarantee  = "guarantee"
	NSystemTime = "systemTime"
	// NRefused holds one ephemeral child per server refusing to run a job
	// stored without code, its data the reason (package jobs writes it).
	NRefused = "refused"

	NHostName = "hostName"
	NStatus   = "status"
	NDisabled = "disabled"
	NSharding = "sharding"
	NSuccess  = "processSuccessCount"
	NFailure  = "processFailureCount"
	// nSuccessTotal and nFailureTotal are the cumulative counts beside the
	// last interval's (a shardflow addition to the 1.x layout).
	NSuccessTotal = "processSuccessTotal"
	NFailureTotal = "processFailureTotal"
	NPaused       = "paused"
	NShutdown     = "shutdown"
	NTrigger      = "trigger"
	NLastError    = "lastError"
	// nRun is the server's run record (runrecord.go, a shardflow addition).
	NRun = "run"
	// nLive is the run record's live marker (servers/{id}/run/live,
	// ephemeral): a monitored normal run of the server is in progress.
	NLive = "live"

	NRunning          = "running"
	NCompleted        = "completed"
	NFailover         = "failover"
	NLastBeginTime    = "lastBeginTime"
	NLastCompleteTime = "lastCompleteTime"
	NNextFireTime     = "nextFireTime"
	NMisfire          = "misfire"

	RelElection     = "leader/election"
	RelLatch        = "leader/election/latch"
	RelHost         = "leader/election/host"
	RelShardingDir  = "leader/sharding"
	NNecessary      = "necessary"
	RelNecessary    = RelShardingDir + "/" + NNecessary
	RelProcessing   = "leader/sharding/processing"
	RelFailoverDir  = "leader/failover"
	RelFailoverQ    = "leader/failover/items"
	RelFailoverLock = "leader/failover/latch"
	RelClock        = "systemTime/current"

	StatusReady   = "READY"
	StatusRunning = "RUNNING"
	StatusOffline = "OFFLINE"

	// jobTypeField is the config child naming the job type; a job joins
	// only under its own type.
	JobTypeField = "jobType"
)

// jobPaths builds the absolute paths of one job.
type JobPaths struct{ Root string }

func NewJobPaths(namespace, job string) JobPaths { return JobPaths{Root: store.Join(namespace, job)} }

func (p JobPaths) Abs(rel string) string      { return store.Join(p.Root, rel) }
func (p JobPaths) Config(field string) string { return store.Join(p.Root, NConfig, field) }

// The elements of Server, Item, RelServer and RelItem go to Join in an
// array on the stack (Join keeps none): a path costs one allocation, its
// own, not a slice too.
func (p JobPaths) Server(id string, node ...string) string {
	var buf [8]string
	return store.Join(append(append(buf[:0], p.Root, NServers, id), node...)...)
}
func (p JobPaths) Item(item int, node ...string) string {
	var buf [8]string
	return store.Join(append(append(buf[:0], p.Root, NExecution, strconv.Itoa(item)), node...)...)
}
func (p JobPaths) Queued(item int) string {
	return store.Join(p.Root, RelFailoverQ, strconv.Itoa(item))
}

// skeletonNodes lists the persistent nodes Join makes sure exist, each
// after its parent (one transaction creates those missing).
var SkeletonNodes = []string{
	NConfig, NServers, NExecution,
	NLeader, RelElection, RelLatch, RelShardingDir, RelFailoverDir, RelFailoverQ,
	NGuarantee, "guarantee/started", "guarantee/completed", NSystemTime,
}

// relServer and relItem build cache keys.
func RelServer(id string, node ...string) string {
	var buf [8]string
	return store.Join(append(append(buf[:0], NServers, id), node...)...)[1:]
}
func RelItem(item int, node ...string) string {
	var buf [8]string
	return store.Join(append(append(buf[:0], NExecution, strconv.Itoa(item)), node...)...)[1:]
}

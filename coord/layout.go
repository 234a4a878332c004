package coord

import (
	"strconv"

	"github.com/shardflow/shardflow/coord/store"
)

// Node names of the layout (docs/zookeeper-layout.md). Paths relative to the
// job root are used by the tree cache; jobPaths builds absolute ones.
const (
	nConfig     = "config"
	nServers    = "servers"
	nExecution  = "execution"
	nLeader     = "leader"
	nGuarantee  = "guarantee"
	nSystemTime = "systemTime"

	nHostName = "hostName"
	nStatus   = "status"
	nDisabled = "disabled"
	nSharding = "sharding"
	nSuccess  = "processSuccessCount"
	nFailure  = "processFailureCount"
	// nSuccessTotal and nFailureTotal are the cumulative counts beside the
	// last interval's (a shardflow addition to the 1.x layout).
	nSuccessTotal = "processSuccessTotal"
	nFailureTotal = "processFailureTotal"
	nPaused       = "paused"
	nShutdown     = "shutdown"
	nTrigger      = "trigger"
	nLastError    = "lastError"
	// nRun is the server's run record (runrecord.go, a shardflow addition).
	nRun = "run"
	// nLive is the run record's live marker (servers/{id}/run/live,
	// ephemeral): a monitored normal run of the server is in progress.
	nLive = "live"

	nRunning          = "running"
	nCompleted        = "completed"
	nFailover         = "failover"
	nLastBeginTime    = "lastBeginTime"
	nLastCompleteTime = "lastCompleteTime"
	nNextFireTime     = "nextFireTime"
	nMisfire          = "misfire"

	relElection     = "leader/election"
	relLatch        = "leader/election/latch"
	relHost         = "leader/election/host"
	relShardingDir  = "leader/sharding"
	nNecessary      = "necessary"
	relNecessary    = relShardingDir + "/" + nNecessary
	relProcessing   = "leader/sharding/processing"
	relFailoverDir  = "leader/failover"
	relFailoverQ    = "leader/failover/items"
	relFailoverLock = "leader/failover/latch"
	relClock        = "systemTime/current"

	statusReady   = "READY"
	statusRunning = "RUNNING"
	statusOffline = "OFFLINE"

	// jobTypeField is the config child naming the job type; a job joins
	// only under its own type.
	jobTypeField = "jobType"

	candidatePrefix = "n_"
)

// jobPaths builds the absolute paths of one job.
type jobPaths struct{ root string }

func newJobPaths(namespace, job string) jobPaths { return jobPaths{root: store.Join(namespace, job)} }

func (p jobPaths) abs(rel string) string      { return store.Join(p.root, rel) }
func (p jobPaths) config(field string) string { return store.Join(p.root, nConfig, field) }
func (p jobPaths) server(id string, node ...string) string {
	return store.Join(append([]string{p.root, nServers, id}, node...)...)
}
func (p jobPaths) item(item int, node ...string) string {
	return store.Join(append([]string{p.root, nExecution, strconv.Itoa(item)}, node...)...)
}
func (p jobPaths) queued(item int) string {
	return store.Join(p.root, relFailoverQ, strconv.Itoa(item))
}

// skeletonNodes lists the persistent nodes Join makes sure exist, each
// after its parent (one transaction creates those missing).
var skeletonNodes = []string{
	nConfig, nServers, nExecution,
	nLeader, relElection, relLatch, relShardingDir, relFailoverDir, relFailoverQ,
	nGuarantee, "guarantee/started", "guarantee/completed", nSystemTime,
}

// relServer and relItem build cache keys.
func relServer(id string, node ...string) string {
	return store.Join(append([]string{nServers, id}, node...)...)[1:]
}
func relItem(item int, node ...string) string {
	return store.Join(append([]string{nExecution, strconv.Itoa(item)}, node...)...)[1:]
}

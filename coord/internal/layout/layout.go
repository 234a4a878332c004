// Package layout is the node layout of a job in the coordination store
// (docs/zookeeper-layout.md) and the codecs of its stored records, shared by
// the protocol (coord/protocol) and the operator API (coord).
package layout

import (
	"strconv"
	"sync"
	"sync/atomic"

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
//
// Both are the same for every job (relative to the job's root) and asked
// for on every run, several times (a server's flags, status and record,
// an item's flags): the paths of up to two nodes under a server or an item
// are built once per process and kept (relPaths), up to relPathsMax of
// them.
func RelServer(id string, node ...string) string {
	if len(node) > 2 {
		var buf [8]string
		return store.Join(append(append(buf[:0], NServers, id), node...)...)[1:]
	}
	k := relKey{server: id, item: -1}
	k.a, k.b = firstTwo(node)
	if s, ok := relPaths.Load(k); ok {
		return s.(string)
	}
	return keepRel(k, store.Join(NServers, id, k.a, k.b)[1:])
}
func RelItem(item int, node ...string) string {
	if len(node) > 2 || item < 0 {
		var buf [8]string
		return store.Join(append(append(buf[:0], NExecution, strconv.Itoa(item)), node...)...)[1:]
	}
	k := relKey{item: item}
	k.a, k.b = firstTwo(node)
	if s, ok := relPaths.Load(k); ok {
		return s.(string)
	}
	return keepRel(k, store.Join(NExecution, strconv.Itoa(item), k.a, k.b)[1:])
}

// relKey is a path RelServer (item -1) or RelItem built: the server or
// the item, and up to two nodes under it ("" for none).
type relKey struct {
	server string
	item   int
	a, b   string
}

// relPaths keeps the paths RelServer and RelItem built (relKey -> string);
// relPathsKept counts them, bounded by relPathsMax (a process of many
// items or servers builds the others each time, as before).
var (
	relPaths     sync.Map
	relPathsKept atomic.Int64
)

const relPathsMax = 1 << 14

func firstTwo(node []string) (a, b string) {
	if len(node) > 0 {
		a = node[0]
	}
	if len(node) > 1 {
		b = node[1]
	}
	return a, b
}

// keepRel keeps s as k's path unless relPathsMax are kept, and returns it.
func keepRel(k relKey, s string) string {
	if relPathsKept.Load() < relPathsMax {
		if _, loaded := relPaths.LoadOrStore(k, s); !loaded {
			relPathsKept.Add(1)
		}
	}
	return s
}

// CountNodes are a server's count nodes (the last interval's and the
// cumulative), created at 0 with its node (registration).
var CountNodes = []string{NSuccess, NFailure, NSuccessTotal, NFailureTotal}

// CountsUnwritten reports whether servers/{id}'s Stat st (the one a
// listing of its children returns) says that its count nodes still hold
// the 0s its registration created them with: that transaction also set the
// node's data (no data, Version 1, Mzxid = Czxid), and every write of the
// counts since sets it again (Mzxid above Czxid). A reader then knows them
// without reading them (a join its totals, status all four); a node of an
// older release (Version 0), or written since, has them read. Only the
// marked node's server writes its counts; a writer of an older release
// leaves the mark standing, which its next join of this release finds out
// (it checks the totals' versions, 0 while unwritten, in its transaction).
func CountsUnwritten(st store.Stat) bool { return st.Version > 0 && st.Mzxid == st.Czxid }

package protocol

import (
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
)

// watchPolicy is what a treeCache keeps of its subtree, and with which
// watches: its owner decides it, the cache only follows it.
type watchPolicy struct {
	// roots are the nodes a resync loads (with what node keeps below them).
	roots []string
	// node says which watches the node at rel (relative to the cache's
	// root) gets: a data watch (its data and Stat are kept) and a children
	// watch (its children list is kept, so their existence is known).
	node func(rel string) (data, children bool)
	// items is the directory of per-item containers (items/{item}): a
	// container's children are read once without a watch and kept current
	// by write-through (the owner writes them at every run); the flags
	// under it in itemFlags get existence watches (node must ask for
	// them too).
	items     string
	itemFlags []string
	// ownRel is the node whose data lists the items the owner runs: only
	// those, and the ones claimed reports, are loaded and watched under
	// items, so a trigger on S servers costs each server re-arms for its
	// own items. "": every item.
	ownRel string
	// versioned is a node whose children (and their data) are kept without
	// watches of their own: every writer of a child bumps the node's data
	// version in the same transaction, so the node's one data watch stands
	// for all of them (treeCache.loadVersioned). "": none.
	versioned string
	// versionedCopy decodes versioned's data when it is a copy of its
	// children (name to data) written with them; false: read the children.
	// nil: never.
	versionedCopy func(data []byte) (map[string]string, bool)
	// claimed reports an item the owner runs beyond ownRel's list (a
	// failover claim). It is called with the cache's lock held and must not
	// call back into the cache. nil: none.
	claimed func(item int) bool
}

// jobWatchPolicy is the job's: config (one watch on the config node,
// whose data version every config writer bumps), servers and their sharding and
// operator flags, the leader's election, flags and failover queue, and this
// server's own items (ownRel, its sharding node; claimed, its failover
// claims) with the item flags others may write.
func jobWatchPolicy(ownRel string, claimed func(int) bool) watchPolicy {
	return watchPolicy{
		roots:         []string{"", layout.NConfig, layout.NServers, layout.NExecution, layout.RelElection, layout.RelShardingDir, layout.RelFailoverQ},
		node:          jobNodeWatches,
		items:         layout.NExecution,
		itemFlags:     []string{layout.NFailover, layout.NDisabled},
		versioned:     layout.NConfig,
		versionedCopy: layout.ParseConfigCopy,
		ownRel:        ownRel,
		claimed:       claimed,
	}
}

// jobNodeWatches says which watches a node of a job (path relative to the
// job root) gets.
func jobNodeWatches(rel string) (data, children bool) {
	parts := strings.Split(rel, "/")
	switch {
	case rel == "":
		// The job node's children: its deletion (the job removed) fires
		// the watch as an existence watch would, and a join's first
		// listing of the job node arms it (no read of its own).
		return false, true
	case len(parts) == 1:
		switch rel {
		case layout.NConfig:
			// Its fields are kept through its data watch (versioned).
			return true, false
		case layout.NServers, layout.NExecution:
			return false, true
		}
	case parts[0] == layout.NServers && len(parts) == 2:
		return false, true
	case parts[0] == layout.NServers && len(parts) == 3:
		switch parts[2] {
		case layout.NSharding, layout.NDisabled, layout.NPaused, layout.NShutdown:
			return true, false
		}
	case parts[0] == layout.NExecution && len(parts) == 2:
		// An item container: its children are read once, without a watch
		// (they change at every trigger, written by this server itself),
		// and kept current by write-through; see load.
		return false, true
	case parts[0] == layout.NExecution && len(parts) == 3:
		// The item flags others may write get existence watches, which
		// fire only when they change.
		return parts[2] == layout.NFailover || parts[2] == layout.NDisabled, false
	case rel == layout.RelElection, rel == layout.RelShardingDir, rel == layout.RelFailoverQ:
		return false, true
	case rel == layout.RelHost:
		return true, false
	}
	return false, false
}

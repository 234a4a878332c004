package jobnodes

import (
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/treecache"
)

// Roots are the roots of a job's tree cache (what a resync loads).
var Roots = []string{"", layout.NConfig, layout.NServers, layout.NExecution, layout.RelElection, layout.RelShardingDir, layout.RelFailoverQ}

// WatchPolicy is the job's on server id: config (one watch on the config
// node, whose data version every config writer bumps), servers (each one's
// children: its status, so which servers are online) with this server's
// sharding and operator flags, and every server's while leading reports
// true (only the leader's duties read them: the live set, the owners of the
// items), the leader's election, flags and failover queue, and this
// server's own items (its sharding node's; claimed, its failover claims)
// with the item flags others may write. leading must not block (the cache
// asks it with its lock held); when it turns true the owner loads what it
// now asks for (treecache.Cache.LoadWanted).
func WatchPolicy(id string, claimed func(int) bool, leading func() bool) treecache.Policy {
	ownRel := layout.RelServer(id, layout.NSharding)
	return treecache.Policy{
		Roots: Roots,
		Node: func(rel string) (data, children bool) {
			data, children = jobNodeWatches(rel)
			if data && isOtherServerFlag(rel, id) && !leading() {
				return false, false
			}
			return data, children
		},
		Items:         layout.NExecution,
		ItemFlags:     []string{layout.NFailover, layout.NDisabled},
		Versioned:     layout.NConfig,
		VersionedCopy: layout.ParseConfigCopy,
		OwnRel:        ownRel,
		OwnItems:      layout.ParseItems,
		Claimed:       claimed,
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

// isOtherServerFlag reports whether rel is servers/{s}/{node} with s not
// id: another server's sharding node or operator flag.
func isOtherServerFlag(rel, id string) bool {
	rest, ok := strings.CutPrefix(rel, layout.NServers+"/")
	if !ok {
		return false
	}
	s, node, ok := strings.Cut(rest, "/")
	return ok && s != id && !strings.Contains(node, "/")
}

// CachedFlag reports the flag node at rel (disabled, paused, shutdown), as
// the cache has it, as on.
func CachedFlag(c *treecache.Cache, rel string) bool {
	d, _, ok := c.Get(rel)
	return ok && layout.FlagTrue(d)
}

package protocol

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// cachedServerState reads server s's state from the tree cache.
func cachedServerState(c *treecache.Cache, s string) layout.ServerState {
	return layout.ServerState{
		Online:   c.Has(layout.RelServer(s, layout.NStatus)),
		Disabled: cachedFlag(c, layout.RelServer(s, layout.NDisabled)),
		Shutdown: cachedFlag(c, layout.RelServer(s, layout.NShutdown)),
		Sharding: c.Has(layout.RelServer(s, layout.NSharding)),
	}
}

// jobNodes reads a job's nodes, directly from the store (where a
// decision must not act on a lagging cache) or from its tree cache, and
// decodes its stored config. It holds only what that needs: the store,
// the job's paths, its name (for errors) and its cache.
type jobNodes struct {
	st    store.Store
	p     layout.JobPaths
	jname string
	cache *treecache.Cache
	// configDecodes counts decodeConfig's calls: a join decodes only a
	// stored config that wins over its own (join_config_test.go).
	configDecodes atomic.Int64
}

// liveServers returns the live servers the tree cache shows, sorted.
func (nd *jobNodes) liveServers() []string {
	var live []string
	for _, s := range nd.cache.Children(layout.NServers) {
		if cachedServerState(nd.cache, s).Live() {
			live = append(live, s)
		}
	}
	return live
}

// readServers reads the server set directly (resharding must not act on
// a lagging cache): every server, whether it has a sharding node, and the
// live ones, sorted; and the membership version (touchMembership) as of
// the listing, which every later change of the set or of a server's flags
// bumps.
func (nd *jobNodes) readServers(ctx context.Context) (map[string]bool, []string, int32, error) {
	names, st, err := nd.st.Children(ctx, nd.p.Abs(layout.NServers))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(layout.NServers), err)
	}
	all := make(map[string]bool, len(names))
	var live []string
	for _, s := range names {
		state, ok, err := layout.ReadServerState(ctx, nd.st, nd.p, s)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("coord: job %q: %w", nd.jname, err)
		}
		if !ok {
			continue
		}
		all[s] = state.Sharding
		if state.Live() {
			live = append(live, s)
		}
	}
	slices.Sort(live)
	return all, live, st.Version, nil
}

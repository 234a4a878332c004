package protocol

import (
	"context"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/internal/layout"
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

// liveServers returns the live servers the tree cache shows, sorted.
func (j *Job) liveServers() []string {
	var live []string
	for _, s := range j.cache.Children(layout.NServers) {
		if cachedServerState(j.cache, s).Live() {
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
func (j *Job) readServers(ctx context.Context) (map[string]bool, []string, int32, error) {
	names, st, err := j.st.Children(ctx, j.p.Abs(layout.NServers))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Abs(layout.NServers), err)
	}
	all := make(map[string]bool, len(names))
	var live []string
	for _, s := range names {
		state, ok, err := layout.ReadServerState(ctx, j.st, j.p, s)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("coord: job %q: %w", j.jname, err)
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

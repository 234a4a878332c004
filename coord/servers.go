package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/store"
)

// The one rule for which server is live, read from the cache (the leader's
// watcher: membership changes, reconcile) or directly from the store
// (resharding, Admin, the failover scan): every caller goes through
// serverState, so they cannot disagree.
//
// A server is online while its ephemeral status node exists: its process
// holds a session and is registered. It is live - resharding gives it
// items, the leader's membership check and reconcile count it - when it is
// online and an operator has neither disabled nor shut it down. Admin acts
// on online servers (a trigger goes to each; Remove refuses while one is).

// serverState is one server's node as the rule reads it.
type serverState struct {
	online, disabled, shutdown bool
	// sharding: the server has a sharding node (it was given items once).
	sharding bool
}

// live reports whether the server takes items: online and not taken out
// by an operator.
func (s serverState) live() bool { return s.online && !s.disabled && !s.shutdown }

// cachedServerState reads server s's state from the tree cache.
func cachedServerState(c *treeCache, s string) serverState {
	return serverState{
		online:   c.has(relServer(s, nStatus)),
		disabled: c.flag(relServer(s, nDisabled)),
		shutdown: c.flag(relServer(s, nShutdown)),
		sharding: c.has(relServer(s, nSharding)),
	}
}

// listedServerState is the state a listing of a server's node shows,
// flags not read (they need a read of their values).
func listedServerState(kids []string) serverState {
	return serverState{online: slices.Contains(kids, nStatus), sharding: slices.Contains(kids, nSharding)}
}

// readServerState reads server s's state directly: one listing of its
// node, and a read of each flag node it has. ok is false when the server's
// node is gone.
func readServerState(ctx context.Context, st store.Store, p jobPaths, s string) (state serverState, ok bool, err error) {
	kids, _, err := st.Children(ctx, p.server(s))
	if errors.Is(err, store.ErrNoNode) {
		return serverState{}, false, nil
	}
	if err != nil {
		return serverState{}, false, fmt.Errorf("coord: read %s: %w", p.server(s), err)
	}
	state = listedServerState(kids)
	for _, f := range []struct {
		name string
		on   *bool
	}{{nDisabled, &state.disabled}, {nShutdown, &state.shutdown}} {
		if !slices.Contains(kids, f.name) {
			continue
		}
		d, _, err := st.Get(ctx, p.server(s, f.name))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return serverState{}, false, fmt.Errorf("coord: read %s: %w", p.server(s, f.name), err)
		}
		*f.on = flagTrue(d)
	}
	return state, true, nil
}

// liveServers returns the live servers the tree cache shows, sorted.
func (j *job) liveServers() []string {
	var live []string
	for _, s := range j.cache.children(nServers) {
		if cachedServerState(j.cache, s).live() {
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
func (j *job) readServers(ctx context.Context) (map[string]bool, []string, int32, error) {
	names, st, err := j.st.Children(ctx, j.p.abs(nServers))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.abs(nServers), err)
	}
	all := make(map[string]bool, len(names))
	var live []string
	for _, s := range names {
		state, ok, err := readServerState(ctx, j.st, j.p, s)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("coord: job %q: %w", j.jname, err)
		}
		if !ok {
			continue
		}
		all[s] = state.sharding
		if state.live() {
			live = append(live, s)
		}
	}
	slices.Sort(live)
	return all, live, st.Version, nil
}

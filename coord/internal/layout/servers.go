package layout

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
type ServerState struct {
	Online, Disabled, Shutdown bool
	// sharding: the server has a sharding node (it was given items once).
	Sharding bool
}

// live reports whether the server takes items: online and not taken out
// by an operator.
func (s ServerState) Live() bool { return s.Online && !s.Disabled && !s.Shutdown }

// listedServerState is the state a listing of a server's node shows,
// flags not read (they need a read of their values).
func ListedServerState(kids []string) ServerState {
	return ServerState{Online: slices.Contains(kids, NStatus), Sharding: slices.Contains(kids, NSharding)}
}

// readServerState reads server s's state directly: one listing of its
// node, and a read of each flag node it has. ok is false when the server's
// node is gone.
func ReadServerState(ctx context.Context, st store.Store, p JobPaths, s string) (state ServerState, ok bool, err error) {
	kids, _, err := st.Children(ctx, p.Server(s))
	if errors.Is(err, store.ErrNoNode) {
		return ServerState{}, false, nil
	}
	if err != nil {
		return ServerState{}, false, fmt.Errorf("coord: read %s: %w", p.Server(s), err)
	}
	state = ListedServerState(kids)
	for _, f := range []struct {
		name string
		on   *bool
	}{{NDisabled, &state.Disabled}, {NShutdown, &state.Shutdown}} {
		if !slices.Contains(kids, f.name) {
			continue
		}
		d, _, err := st.Get(ctx, p.Server(s, f.name))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return ServerState{}, false, fmt.Errorf("coord: read %s: %w", p.Server(s, f.name), err)
		}
		*f.on = FlagTrue(d)
	}
	return state, true, nil
}

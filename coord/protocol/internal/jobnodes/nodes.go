// Package jobnodes reads a job's nodes for the protocol: directly from the
// store where a decision must not act on a lagging cache, or from the job's
// tree cache, whose watch policy (policy.go) it also states; and it decodes
// the job's stored config.
package jobnodes

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol/internal/txn"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// CachedServerState reads server s's state from the tree cache.
func CachedServerState(c *treecache.Cache, s string) layout.ServerState {
	return layout.ServerState{
		Online:   c.Has(layout.RelServer(s, layout.NStatus)),
		Disabled: CachedFlag(c, layout.RelServer(s, layout.NDisabled)),
		Shutdown: CachedFlag(c, layout.RelServer(s, layout.NShutdown)),
		Sharding: c.Has(layout.RelServer(s, layout.NSharding)),
	}
}

// Nodes reads a job's nodes, directly from the store (where a
// decision must not act on a lagging cache) or from its tree cache, and
// decodes its stored config. It holds only what that needs: the store,
// the job's paths, its name (for errors) and its cache.
// Its fields never change: it is safe for concurrent use.
type Nodes struct {
	st    store.Store
	p     layout.JobPaths
	jname string
	cache *treecache.Cache
	// configDecodes counts DecodeConfig's calls: a join decodes only a
	// stored config that wins over its own (join_config_test.go).
	configDecodes atomic.Int64
}

// New returns the reader of job jname's nodes at p, over st and cache.
func New(st store.Store, p layout.JobPaths, jname string, cache *treecache.Cache) *Nodes {
	return &Nodes{st: st, p: p, jname: jname, cache: cache}
}

// ConfigDecodes is how many times DecodeConfig ran.
func (nd *Nodes) ConfigDecodes() int64 { return nd.configDecodes.Load() }

// LiveServers returns the live servers the tree cache shows, sorted.
func (nd *Nodes) LiveServers() []string {
	var live []string
	for _, s := range nd.cache.Children(layout.NServers) {
		if CachedServerState(nd.cache, s).Live() {
			live = append(live, s)
		}
	}
	return live
}

// ReadServers reads the server set directly (resharding must not act on
// a lagging cache): every server, whether it has a sharding node, and the
// live ones, sorted; and the membership version (touchMembership) as of
// the listing, which every later change of the set or of a server's flags
// bumps.
func (nd *Nodes) ReadServers(ctx context.Context) (map[string]bool, []string, int32, error) {
	names, st, err := nd.ListServers(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	return nd.ReadListedServers(ctx, names, st)
}

// ListServers lists the servers directly, with the Stat of the listing
// (its data version is the membership version).
func (nd *Nodes) ListServers(ctx context.Context) ([]string, store.Stat, error) {
	names, st, err := nd.st.Children(ctx, nd.p.Abs(layout.NServers))
	if err != nil {
		return nil, st, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(layout.NServers), err)
	}
	return names, st, nil
}

// ReadListedServers is ReadServers on a direct listing of the servers
// made before (names, read with st): each server's state is read now, side
// by side.
func (nd *Nodes) ReadListedServers(ctx context.Context, names []string, st store.Stat) (map[string]bool, []string, int32, error) {
	states := make([]layout.ServerState, len(names))
	found := make([]bool, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layout.ItemReaders)
	for i, s := range names {
		g.Go(func() error {
			state, ok, err := layout.ReadServerState(gctx, nd.st, nd.p, s)
			if err != nil {
				return fmt.Errorf("coord: job %q: %w", nd.jname, err)
			}
			states[i], found[i] = state, ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, 0, err
	}
	all := make(map[string]bool, len(names))
	var live []string
	for i, s := range names {
		if !found[i] {
			continue
		}
		all[s] = states[i].Sharding
		if states[i].Live() {
			live = append(live, s)
		}
	}
	slices.Sort(live)
	return all, live, st.Version, nil
}

// FailoverOn reports whether cfg allows failover: failover on, and
// monitorExecution on (without live markers nothing tells a crash from a
// run still going: docs/configuration.md, "What monitorExecution = false
// gives up").
func FailoverOn(cfg jobconfig.Config) bool { return cfg.Failover && cfg.MonitorsExecution() }

// StoredFailoverOn reads the stored config directly (the config node's copy
// of the fields, else the field nodes) and reports failoverOn for it, with
// the config node's version it was read at (every edit bumps it in the
// same transaction as its fields). A config that does not decode allows
// nothing (the job stops on it anyway).
func (nd *Nodes) StoredFailoverOn(ctx context.Context) (int32, bool, error) {
	v, cfg, err := nd.StoredConfig(ctx)
	if err != nil {
		return 0, false, err
	}
	return v, FailoverOn(cfg), nil
}

// StoredConfig reads the stored config directly (see StoredFailoverOn),
// with the config node's version it was read at. A config that does not
// decode is the zero Config (failover off).
func (nd *Nodes) StoredConfig(ctx context.Context) (int32, jobconfig.Config, error) {
	data, st, err := nd.st.Get(ctx, nd.p.Abs(layout.NConfig))
	if err != nil {
		return 0, jobconfig.Config{}, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(layout.NConfig), err)
	}
	fields, ok := layout.ParseConfigCopy(data)
	if !ok {
		if fields, err = nd.ReadConfigFields(ctx); err != nil {
			return 0, jobconfig.Config{}, err
		}
	}
	cfg, err := nd.DecodeConfig(fields)
	if err != nil {
		return st.Version, jobconfig.Config{}, nil
	}
	return st.Version, cfg, nil
}

// CachedConfigFields returns the config fields the tree cache holds.
func (nd *Nodes) CachedConfigFields() map[string]string {
	fields := nd.cache.VersionedFields(layout.NConfig)
	if fields == nil {
		fields = map[string]string{}
	}
	return fields
}

// ReadConfigFields reads the config's field nodes directly, side by side.
func (nd *Nodes) ReadConfigFields(ctx context.Context) (map[string]string, error) {
	names, _, err := nd.st.Children(ctx, nd.p.Abs(layout.NConfig))
	if err != nil {
		return nil, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(layout.NConfig), err)
	}
	// The fields are read side by side: the store pipelines them on its
	// session, so a join waits about one round trip for them, not one per
	// field.
	data := make([][]byte, len(names))
	var g errgroup.Group
	g.SetLimit(configReaders)
	for i, n := range names {
		g.Go(func() error {
			d, _, err := nd.st.Get(ctx, nd.p.Config(n))
			if errors.Is(err, store.ErrNoNode) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Config(n), err)
			}
			data[i] = d
			if d == nil {
				data[i] = []byte{}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	fields := make(map[string]string, len(names))
	for i, n := range names {
		if data[i] != nil {
			fields[n] = string(data[i])
		}
	}
	return fields, nil
}

// configReaders bounds the config field reads of one join in flight.
const configReaders = 8

// DecodeConfig decodes stored fields; errors wrap ErrBadConfig and name the node.
func (nd *Nodes) DecodeConfig(fields map[string]string) (jobconfig.Config, error) {
	nd.configDecodes.Add(1)
	return layout.DecodeStoredConfig(nd.p, nd.jname, fields)
}

// ReadTotal reads the stored shardingTotalCount directly, with a check op on
// its version for the reshard's Multi; def (and no check) when the node is
// absent or unparsable (the config decoder reports those).
func (nd *Nodes) ReadTotal(ctx context.Context, def int) (int, *txn.Intent, error) {
	rel := layout.NConfig + "/" + jobconfig.FieldShardingTotalCount
	data, st, err := nd.st.Get(ctx, nd.p.Abs(rel))
	if errors.Is(err, store.ErrNoNode) {
		return def, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(rel), err)
	}
	n, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if perr != nil || n < 1 {
		return def, nil, nil
	}
	return n, &txn.Intent{Kind: txn.Check, Rel: rel, Version: st.Version}, nil
}

// FailoverDir is a Begin's read of the failover directory
// (leader/failover/items): the items queued for failover and the
// directory's data version, which every failover writer bumps.
type FailoverDir struct {
	Queued map[int]bool
	// Claims are the items with a claim record (claimrecord.go).
	Claims  map[int]bool
	Version int32
}

// ReadFailoverDir lists the failover directory with its Stat (one read).
func (nd *Nodes) ReadFailoverDir(ctx context.Context) (FailoverDir, error) {
	names, st, err := nd.st.Children(ctx, nd.p.Abs(layout.RelFailoverQ))
	if errors.Is(err, store.ErrNoNode) {
		return FailoverDir{Version: -1}, nil
	}
	if err != nil {
		return FailoverDir{}, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(layout.RelFailoverQ), err)
	}
	nd.cache.NoteListing(layout.RelFailoverQ, names, st)
	l := layout.ParseFailoverDir(names)
	return FailoverDir{Queued: l.Queued, Claims: l.Claims, Version: st.Version}, nil
}

// FailoverDir is ReadFailoverDir, from the tree cache when cached and the
// cache has the directory listed (no read): its listing and the Stat of
// that same read (treecache.Cache.Listing), so a lagging cache gives an
// older version, which Begin's transaction checks and refuses.
func (nd *Nodes) FailoverDir(ctx context.Context, cached bool) (FailoverDir, error) {
	names, st, ok := nd.cache.Listing(layout.RelFailoverQ)
	if !cached || !ok {
		return nd.ReadFailoverDir(ctx)
	}
	l := layout.ParseFailoverDir(names)
	return FailoverDir{Queued: l.Queued, Claims: l.Claims, Version: st.Version}, nil
}

// Sharding reads server's sharding node (false: absent), from the tree
// cache when cached and the cache has it (its data and Stat are of one
// read), else directly: absent from the cache proves nothing (not loaded
// yet).
func (nd *Nodes) Sharding(ctx context.Context, server string, cached bool) ([]byte, store.Stat, bool, error) {
	data, st, ok := nd.cache.Get(layout.RelServer(server, layout.NSharding))
	if cached && ok {
		return data, st, true, nil
	}
	data, st, err := nd.st.Get(ctx, nd.p.Server(server, layout.NSharding))
	if err != nil && !errors.Is(err, store.ErrNoNode) {
		return nil, st, false, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Server(server, layout.NSharding), err)
	}
	return data, st, err == nil, nil
}

// CachedFlagVersion is the resharding flag's absence from the tree cache:
// the flag directory's data version read with a listing that shows neither
// the flag nor processing (false otherwise: read it directly, and wait or
// reshard). Every raise of the flag bumps that version
// (layout.RaiseFlagOps): Begin's transaction, which checks it, refuses a
// run planned on a cache that has not seen a flag raised since.
func CachedFlagVersion(c *treecache.Cache) (int32, bool) {
	names, st, ok := c.Listing(layout.RelShardingDir)
	if !ok || slices.Contains(names, layout.NNecessary) || slices.Contains(names, path.Base(layout.RelProcessing)) {
		return -1, false
	}
	return st.Version, true
}

// ItemHas reports whether an execution node exists: from the cache when
// the item is loaded there, else by a direct read (only right after the
// item became this server's).
func (nd *Nodes) ItemHas(ctx context.Context, rel string) (bool, error) {
	if nd.cache.Known(rel) {
		return nd.cache.Has(rel), nil
	}
	ok, _, err := nd.st.Exists(ctx, nd.p.Abs(rel))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read %s: %w", nd.jname, nd.p.Abs(rel), err)
	}
	return ok, nil
}

// NoCachedMisfire reports whether the tree cache shows no misfire flag on
// any of server's items (its cached sharding node's, below total), the
// cache knowing each item's nodes (treecache.Cache.Known). Misfire flags
// are written by the owner's own Begins (written through to its cache), or
// by a former owner and read with the item's container when the item
// became this server's; a flag the cache has yet to show (an item just
// assigned, its container not listed yet) is seen by a later call. false:
// the cache shows one, or cannot say (read directly then).
func NoCachedMisfire(c *treecache.Cache, server string, total int) bool {
	data, _, ok := c.Get(layout.RelServer(server, layout.NSharding))
	if !ok || c.Incomplete() {
		return false
	}
	items, err := layout.ParseItems(data)
	if err != nil {
		return false
	}
	for _, it := range items {
		rel := layout.RelItem(it, layout.NMisfire)
		if it < total && (!c.Known(rel) || c.Has(rel)) {
			return false
		}
	}
	return true
}

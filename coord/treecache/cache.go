// Package treecache mirrors a subtree of the coordination store in memory,
// kept current by one-shot watches re-armed as they fire and rebuilt after
// a session change, so that coord's hot paths (a trigger, a Begin) cost no
// reads. What it keeps, and with which watches, is its owner's Policy.
package treecache

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shardflow/shardflow/coord/store"
)

// Cache mirrors the hot part of one job's subtree (config, servers,
// execution, leader flags) in memory, kept current by one-shot watches that
// are re-armed per node each time they fire, and rebuilt in full after a
// session change. Begin, KeepGoing and the reactions of the job's watcher
// read it, so a trigger costs no reads.
//
// Threading: only the job's watcher (its steps on the Registry's event
// loop, one at a time; and Join, before the watcher starts) calls load,
// resync and handle, which do store calls and arm
// watches. Readers and the write-through notes may run on any goroutine;
// everything is guarded by mu.
//
// What it keeps, and with which watches, is its watch policy (Policy,
// passed in by its owner: the job's is jobWatchPolicy). Existence of a node
// is read from its parent's children list (every parent of a node whose
// existence matters is children-watched); data and Stat are kept for the
// nodes whose policy asks for it.
type Cache struct {
	st   *cacheStore
	root string
	pol  Policy

	mu      sync.RWMutex
	nodes   map[string]*cnode
	stubs   map[string]bool // stub nodes the watcher must load
	changed chan struct{}
	// writes counts our write-throughs (NoteCreated, NoteDeleted): an
	// unwatched read that overlapped one may hold what it undid, so it reads
	// again (loadItem).
	writes uint64
	// kick wakes the watcher (to load stubs).
	kick func()
	// ahead: nodes LoadRootsAhead is loading beside their parents; a
	// parent's listing leaves them to it instead of reading them twice.
	ahead map[string]bool
	// ownData and ownItems memoize the parse of pol.OwnRel's data (mu held for
	// writing): wantedLocked is asked once per item, and parsing a sharding
	// node of thousands of items each time made a trigger O(items^2).
	ownData  []byte
	ownItems map[int]bool
	// partial: a resync cleared the nodes and has not loaded them all
	// again (it failed midway, say on a connection lost again): absent
	// nodes then prove nothing.
	partial bool
}

type cnode struct {
	data    []byte
	stat    store.Stat
	hasData bool
	// stub marks a node known only from our own writes: not yet loaded
	// and not watched; the next children reload of its parent loads it.
	stub     bool
	children []string
	// kidData is, for pol.Versioned only, the data of each of children
	// (same order): its children have no nodes of their own.
	kidData []string
	// listStat is the Stat read with children by the node's last
	// watched listing (nil: none yet), kept with it for Listing: the pair
	// is one read, as a direct listing's is. A pointer, as only listed
	// nodes have one: a leaf's node is then 208 bytes, not 320 (a job's
	// tree cache holds some 30 nodes, most of them leaves).
	listStat *store.Stat
	dataW    watchID
	childW   watchID
}

type watchKind int

const (
	watchData watchKind = iota + 1
	watchChildren
)

// New returns an empty cache of the subtree at root, reading st, keeping
// what pol says, its watches armed through w (st's, or a wrapper that
// queues their events) and their events passed to deliver (to be handed
// back to Handle by the owner's watcher); kick (nil: none) wakes its
// owner's watcher to load nodes known only from write-throughs
// (LoadStubs).
func New(st store.Store, w store.FuncWatcher, root string, pol Policy, deliver func(WatchRef, store.Event), kick func()) *Cache {
	cs := &cacheStore{Store: st, w: w, root: root, deliver: deliver}
	if kick == nil {
		kick = func() {}
	}
	if pol.Claimed == nil {
		pol.Claimed = func(int) bool { return false }
	}
	if pol.VersionedCopy == nil {
		pol.VersionedCopy = func([]byte) (map[string]string, bool) { return nil, false }
	}
	return &Cache{st: cs, root: root, pol: pol, kick: kick, nodes: make(map[string]*cnode), stubs: make(map[string]bool), ahead: make(map[string]bool), changed: make(chan struct{})}
}

func parentRel(rel string) string {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ""
	}
	return rel[:i]
}

func joinRel(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "/" + name
}

// Resync drops everything and loads the tree again (after a session change).
func (c *Cache) Resync(ctx context.Context) error {
	c.BeginLoad()
	if err := c.LoadRootsAhead(ctx, c.pol.Roots, nil); err != nil {
		return err
	}
	return c.EndLoad(ctx)
}

// BeginLoad drops everything: a full load (LoadRoots, then EndLoad)
// follows. Join splits one so it reads the config before it registers.
func (c *Cache) BeginLoad() {
	c.mu.Lock()
	c.nodes = make(map[string]*cnode)
	clear(c.stubs)
	c.partial = true
	c.mu.Unlock()
}

// LoadRoots loads the roots rels side by side (and their children, see
// reloadChildren): the store pipelines the reads on its session, so a load
// takes a round trip per level of the tree, not one per node.
func (c *Cache) LoadRoots(ctx context.Context, rels []string) error {
	if len(rels) == 1 {
		return c.Load(ctx, rels[0])
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, rel := range rels {
		g.Go(func() error { return c.Load(gctx, rel) })
	}
	return g.Wait()
}

// LoadRootsAhead is LoadRoots that also loads the nodes ahead, known to
// exist below those roots (a join's own writes: its host node, its
// sharding), side by side with the roots instead of after their parents'
// listings: one round trip for the whole load rather than one per level.
// The roots themselves count as ahead too (the job node's listing holds
// some of them). A node ahead found missing while its parent's listing
// shows it (created in between) is loaded again after.
func (c *Cache) LoadRootsAhead(ctx context.Context, rels, ahead []string) error {
	ahead = append(slices.Clone(ahead), rels...)
	c.mu.Lock()
	for _, rel := range ahead {
		c.ahead[rel] = true
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		clear(c.ahead)
		c.mu.Unlock()
	}()
	g, gctx := errgroup.WithContext(ctx)
	for _, rel := range ahead {
		g.Go(func() error { return c.Load(gctx, rel) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var again []string
	c.mu.Lock()
	for _, rel := range ahead {
		if c.nodes[rel] == nil && c.hasLocked(rel) {
			again = append(again, rel)
		}
	}
	clear(c.ahead) // a node loaded again below is its own parent's no longer
	c.mu.Unlock()
	for _, rel := range again {
		if err := c.Load(ctx, rel); err != nil {
			return err
		}
	}
	return nil
}

// EndLoad completes a full load: the items this server owns are known
// once pol.OwnRel is loaded, which may have come after the items
// directory's list; then the watcher is notified.
func (c *Cache) EndLoad(ctx context.Context) error {
	// Quiet: the load notifies once, below.
	if err := c.loadAllQuiet(ctx, c.itemsToRefresh()); err != nil {
		return err
	}
	c.mu.Lock()
	c.partial = false
	c.mu.Unlock()
	c.notify()
	return nil
}

// MissingRoots lists the roots (other than the job's own node) a full
// load found absent.
func (c *Cache) MissingRoots() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, rel := range c.pol.Roots {
		if rel != "" && c.nodes[rel] == nil {
			out = append(out, rel)
		}
	}
	return out
}

// Incomplete reports whether a resync is unfinished (see partial).
func (c *Cache) Incomplete() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.partial
}

// isItemContainer reports {Items}/{item}; isItemFlag its watched flags.
func (p Policy) isItemContainer(rel string) bool {
	return strings.HasPrefix(rel, p.Items+"/") && strings.Count(rel, "/") == 1
}

func (p Policy) isItemFlag(rel string) bool {
	return strings.HasPrefix(rel, p.Items+"/") && strings.Count(rel, "/") == 2
}

// loadItem reads an item container's children once (no watch) and arms
// existence watches on its flags.
func (c *Cache) loadItem(ctx context.Context, rel string) error {
	// The flags' watches first, then the children: a change after a
	// flag's read fires its watch (handle then reads the container
	// again), so the children are never older than the flags. The other
	// way round, a failover run's Complete between the two reads left the
	// item running and not completed in the cache for good: the claim's
	// failover node, read after, was already gone, so no watch fired.
	for _, flag := range c.pol.ItemFlags {
		if err := c.reloadData(ctx, joinRel(rel, flag)); err != nil {
			return err
		}
	}
	return c.readItem(ctx, rel)
}

// readItem reads an item container's children and Stat (no watch) into
// the cache; a container found gone is dropped.
func (c *Cache) readItem(ctx context.Context, rel string) error {
	// The item container is not watched, so nothing would correct a list
	// read before one of our own Begins or Completes committed and stored
	// after its write-through (a "running" left in the cache for good): a
	// read that overlapped a write-through is read again.
	var (
		names []string
		cst   store.Stat
	)
	for {
		c.mu.RLock()
		seq := c.writes
		c.mu.RUnlock()
		var err error
		names, cst, err = c.st.Children(ctx, c.st.abs(rel))
		if errors.Is(err, store.ErrNoNode) {
			c.drop(rel)
			return nil
		}
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.writes == seq {
			break // still locked
		}
		c.mu.Unlock()
	}
	n := c.node(rel)
	// Keep names written through meanwhile by this server.
	for _, name := range n.children {
		if _, ok := slices.BinarySearch(names, name); !ok && n.stub {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	n.children, n.childW, n.stub = names, 0, false
	// The container's Stat goes with its children: the item's epoch
	// derives from it, and never from an older read than its
	// flags.
	if cst.Mzxid >= n.stat.Mzxid {
		n.stat = cst
	}
	c.mu.Unlock()
	return nil
}

// Load reads rel per its policy, arms its watches, and loads its children.
func (c *Cache) Load(ctx context.Context, rel string) error {
	if c.pol.isItemContainer(rel) {
		return c.loadItem(ctx, rel)
	}
	if rel == c.pol.Versioned && rel != "" {
		return c.loadVersioned(ctx, rel)
	}
	data, children := c.pol.Node(rel)
	if data {
		if err := c.reloadData(ctx, rel); err != nil {
			return err
		}
	}
	if children {
		return c.reloadChildren(ctx, rel)
	}
	return nil
}

func (c *Cache) node(rel string) *cnode {
	n := c.nodes[rel]
	if n == nil {
		n = &cnode{}
		// The same relative paths recur in every job of a process.
		c.nodes[intern(rel)] = n
	}
	return n
}

func (c *Cache) reloadData(ctx context.Context, rel string) error {
	if rel == c.pol.Versioned && rel != "" {
		return c.loadVersioned(ctx, rel)
	}
	var (
		data   []byte
		stat   store.Stat
		ch     watchID
		exists = true
		err    error
	)
	if rel == "" || c.pol.isItemFlag(rel) {
		exists, stat, ch, err = c.st.ExistsW(ctx, c.st.abs(rel))
	} else {
		data, stat, ch, err = c.st.GetW(ctx, c.st.abs(rel))
		if errors.Is(err, store.ErrNoNode) {
			exists, err = false, nil
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pol.isItemFlag(rel) {
		// The node stays (it holds the watch); its existence is mirrored
		// into the container's children list.
		n := c.node(rel)
		n.data, n.stat, n.hasData, n.dataW, n.stub = nil, stat, exists, ch, false
		if p := c.nodes[parentRel(rel)]; p != nil {
			name := rel[strings.LastIndexByte(rel, '/')+1:]
			i, ok := slices.BinarySearch(p.children, name)
			switch {
			case exists && !ok:
				p.children = slices.Insert(slices.Clone(p.children), i, name)
			case !exists && ok:
				p.children = slices.Delete(slices.Clone(p.children), i, i+1)
			}
		}
		return nil
	}
	if !exists && rel != "" {
		dropTree(c.nodes, rel)
		return nil
	}
	n := c.node(rel)
	n.data, n.stat, n.hasData, n.dataW, n.stub = data, stat, exists, ch, false
	return nil
}

func (c *Cache) reloadChildren(ctx context.Context, rel string) error {
	names, st, ch, err := c.st.ChildrenW(ctx, c.st.abs(rel))
	if errors.Is(err, store.ErrNoNode) {
		c.drop(rel)
		return nil
	}
	if err != nil {
		return err
	}
	var toLoad []string
	c.mu.Lock()
	n := c.node(rel)
	old := n.children
	n.children, n.childW, n.stub = names, ch, false
	n.listStat = &st
	for _, name := range old {
		if _, ok := slices.BinarySearch(names, name); !ok {
			dropTree(c.nodes, joinRel(rel, name))
		}
	}
	for _, name := range names {
		crel := joinRel(rel, name)
		d, k := c.pol.Node(crel)
		if rel == c.pol.Items && !c.wantedLocked(name) {
			continue
		}
		if cn := c.nodes[crel]; (d || k) && (cn == nil || cn.stub) && !c.ahead[crel] {
			toLoad = append(toLoad, crel)
		}
	}
	c.mu.Unlock()
	// Side by side, as resync's roots.
	if len(toLoad) == 1 {
		return c.Load(ctx, toLoad[0])
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(childReaders)
	for _, crel := range toLoad {
		g.Go(func() error { return c.Load(gctx, crel) })
	}
	return g.Wait()
}

// LoadShallow reads rel's children with a watch, as reloadChildren does,
// but loads none of them: a join lists the servers before its transaction
// and loads their nodes after it (joinServerRoots). It returns the listing
// and its Stat. A missing node is dropped (and store.ErrNoNode returned).
func (c *Cache) LoadShallow(ctx context.Context, rel string) ([]string, store.Stat, error) {
	names, st, ch, err := c.st.ChildrenW(ctx, c.st.abs(rel))
	if errors.Is(err, store.ErrNoNode) {
		c.drop(rel)
		return nil, store.Stat{}, err
	}
	if err != nil {
		return nil, store.Stat{}, err
	}
	c.mu.Lock()
	n := c.node(rel)
	n.children, n.childW, n.stub = names, ch, false
	n.listStat = &st
	c.mu.Unlock()
	return names, st, nil
}

// childReaders bounds the children of one node loaded at once.
const childReaders = 32

// loadVersioned loads pol.Versioned (rel): a data watch on the node
// itself, armed first, then its children and their data read without
// watches, side by side. Every writer of a child bumps rel's data version
// in the same transaction, so the watch fires after any change of a child
// and the reads that follow see it (docs/zookeeper-layout.md, "config").
// When the node's data is a copy of its children (pol.VersionedCopy: every
// shardflow writer writes one), the copy stands for the reads.
func (c *Cache) loadVersioned(ctx context.Context, rel string) error {
	data, stat, ch, err := c.st.GetW(ctx, c.st.abs(rel))
	if errors.Is(err, store.ErrNoNode) {
		c.drop(rel)
		return nil
	}
	if err != nil {
		return err
	}
	var (
		names []string
		kids  [][]byte
	)
	if copied, ok := c.pol.VersionedCopy(data); ok {
		data = nil // kept as kidData; nobody reads the copy itself
		names = slices.Sorted(maps.Keys(copied))
		for _, n := range names {
			kids = append(kids, []byte(copied[n]))
		}
	} else {
		names, _, err = c.st.Children(ctx, c.st.abs(rel))
		if errors.Is(err, store.ErrNoNode) {
			c.drop(rel)
			return nil
		}
		if err != nil {
			return err
		}
		kids = make([][]byte, len(names))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(childReaders)
		for i, n := range names {
			g.Go(func() error {
				d, _, err := c.st.Get(gctx, c.st.abs(joinRel(rel, n)))
				if errors.Is(err, store.ErrNoNode) {
					return nil // deleted meanwhile: the watch fired
				}
				if err != nil {
					return err
				}
				if d == nil {
					d = []byte{}
				}
				kids[i] = d
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(rel)
	n.data, n.stat, n.hasData, n.dataW, n.stub = data, stat, true, ch, false
	// The children are kept compactly on n (kidData), their names and
	// common values shared between jobs (intern): thousands of jobs hold
	// the same two dozen field names and mostly the same values.
	n.children, n.kidData = make([]string, 0, len(names)), make([]string, 0, len(names))
	for i, name := range names {
		if kids[i] == nil {
			continue
		}
		n.children = append(n.children, intern(name))
		n.kidData = append(n.kidData, internBytes(kids[i]))
	}
	return nil
}

// VersionedFields returns the children of pol.Versioned rel and their data
// (nil when rel is not loaded).
func (c *Cache) VersionedFields(rel string) map[string]string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[rel]
	if n == nil || rel != c.pol.Versioned {
		return nil
	}
	out := make(map[string]string, len(n.children))
	for i, name := range n.children {
		out[name] = n.kidData[i]
	}
	return out
}

// internMax bounds the strings intern keeps (and their length).
const (
	internMax    = 4096
	internMaxLen = 64
)

var (
	internMu    sync.Mutex
	internTable = make(map[string]string)
)

// intern returns a shared copy of s when it is short and the table has
// room: config field names and common values, repeated in every job.
func intern(s string) string {
	if len(s) > internMaxLen {
		return s
	}
	internMu.Lock()
	defer internMu.Unlock()
	if t, ok := internTable[s]; ok {
		return t
	}
	if len(internTable) < internMax {
		internTable[s] = s
	}
	return s
}

// internBytes is intern of string(b), without the copy when b's text is
// in the table already.
func internBytes(b []byte) string {
	if len(b) > internMaxLen {
		return string(b)
	}
	internMu.Lock()
	if t, ok := internTable[string(b)]; ok {
		internMu.Unlock()
		return t
	}
	internMu.Unlock()
	return intern(string(b))
}

// wantedLocked reports whether execution/{name} is watched; mu held.
func (c *Cache) wantedLocked(name string) bool {
	it, ok := itemOf(name)
	if !ok {
		return false
	}
	if c.pol.OwnRel == "" || c.pol.Claimed(it) {
		return true
	}
	n := c.nodes[c.pol.OwnRel]
	if n == nil || !n.hasData {
		return false
	}
	if c.ownItems == nil || !bytes.Equal(c.ownData, n.data) {
		items, err := c.pol.OwnItems(n.data)
		if err != nil {
			return false
		}
		c.ownData = bytes.Clone(n.data)
		c.ownItems = make(map[int]bool, len(items))
		for _, i := range items {
			c.ownItems[i] = true
		}
	}
	return c.ownItems[it]
}

// RefreshItems loads the execution/{item} nodes that became wanted and
// forgets those no longer wanted; watcher only.
func (c *Cache) RefreshItems(ctx context.Context) error {
	rels := c.itemsToRefresh()
	return c.loadAll(ctx, rels)
}

// LoadWanted loads the nodes the policy asks for now and the cache has not
// loaded, below every listing it keeps (the owner's Policy.Node changed
// its answer, say on becoming the job's leader; item containers are
// RefreshItems'). Nodes it no longer asks for are dropped when their
// watches fire (Handle), unread. Watcher only (or Join, before it).
func (c *Cache) LoadWanted(ctx context.Context) error {
	c.mu.RLock()
	var rels []string
	for rel, n := range c.nodes {
		if n.stub || n.listStat == nil || rel == c.pol.Items || rel == c.pol.Versioned && rel != "" || c.pol.isItemContainer(rel) {
			continue
		}
		for _, name := range n.children {
			crel := joinRel(rel, name)
			if cn := c.nodes[crel]; cn != nil && !cn.stub {
				continue
			}
			if d, k := c.pol.Node(crel); d || k {
				rels = append(rels, crel)
			}
		}
	}
	c.mu.RUnlock()
	slices.Sort(rels)
	if len(rels) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(childReaders)
	for _, rel := range rels {
		g.Go(func() error { return c.Load(gctx, rel) })
	}
	err := g.Wait()
	c.notify()
	return err
}

// itemsToRefresh drops the item containers no longer wanted and returns
// those wanted but not loaded.
func (c *Cache) itemsToRefresh() []string {
	c.mu.Lock()
	var toLoad []string
	if n := c.nodes[c.pol.Items]; n != nil {
		for _, name := range n.children {
			rel := joinRel(c.pol.Items, name)
			cn := c.nodes[rel]
			switch want := c.wantedLocked(name); {
			case want && (cn == nil || cn.stub):
				toLoad = append(toLoad, rel)
			case !want && cn != nil:
				dropTree(c.nodes, rel)
			}
		}
	}
	c.mu.Unlock()
	return toLoad
}

// loadAll loads each node of rels and notifies the watcher once if any was
// loaded. The caller must not hold c.mu.
func (c *Cache) loadAll(ctx context.Context, rels []string) error {
	if err := c.loadAllQuiet(ctx, rels); err != nil {
		return err
	}
	if len(rels) > 0 {
		c.notify()
	}
	return nil
}

// loadAllQuiet is loadAll without the notification.
func (c *Cache) loadAllQuiet(ctx context.Context, rels []string) error {
	// Item containers are independent of each other: they are read
	// pipelined (itemReaders requests in flight), since a server taking
	// over thousands of items (a crashed server's, after the reshard) would
	// otherwise read them one after the other, three round trips each.
	var items []string
	for _, rel := range rels {
		if c.pol.isItemContainer(rel) {
			items = append(items, rel)
			continue
		}
		if err := c.Load(ctx, rel); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(itemReaders / 3)
	for _, rel := range items {
		g.Go(func() error { return c.Load(gctx, rel) })
	}
	return g.Wait()
}

// Known reports whether the cache can answer has(rel) for an execution
// node: its item is loaded. Elsewhere it is always true.
func (c *Cache) Known(rel string) bool {
	if !strings.HasPrefix(rel, c.pol.Items+"/") || strings.Count(rel, "/") < 2 {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[parentRel(rel)]
	if n != nil && !n.stub {
		return true
	}
	// A container missing from the watched listing of the items has no
	// children: normal runs write none (layout 2), so most items have no
	// container, and asking the store about each would cost a read per
	// item per trigger. A container created since the listing shows up
	// through the listing's watch; what must not lag is covered by the
	// failover directory's version (Begin, markRunning).
	if items := c.nodes[c.pol.Items]; items != nil && !items.stub && n == nil && strings.Count(rel, "/") == 2 {
		_, ok := slices.BinarySearch(items.children, strings.Split(rel, "/")[1])
		return !ok
	}
	return false
}

// drop forgets rel and everything below it (a node found gone).
func (c *Cache) drop(rel string) {
	c.mu.Lock()
	dropTree(c.nodes, rel)
	c.mu.Unlock()
}

// dropTree forgets rel and everything below it in nodes (the cache's, mu
// held for writing).
func dropTree(nodes map[string]*cnode, rel string) {
	delete(nodes, rel)
	prefix := rel + "/"
	for k := range nodes {
		if strings.HasPrefix(k, prefix) {
			delete(nodes, k)
		}
	}
}

// Handle re-reads the node whose watch fired and re-arms it. A
// not-watching event of the node's current watch returns ErrResyncNeeded;
// one of a watch replaced since (the node was reloaded or dropped) says
// nothing about the current one and is ignored.
func (c *Cache) Handle(ctx context.Context, ref WatchRef, ev store.Event) error {
	c.mu.Lock()
	current := false
	if n := c.nodes[ref.Rel]; n != nil {
		if ref.kind == watchData && n.dataW == ref.id {
			n.dataW, current = 0, true
		}
		if ref.kind == watchChildren && n.childW == ref.id {
			n.childW, current = 0, true
		}
	}
	c.mu.Unlock()
	if ev.Type == store.EventNotWatching {
		if !current {
			return nil
		}
		return ErrResyncNeeded
	}
	if current && c.pol.unwanted(ref) {
		// The policy no longer asks for this watch (LoadWanted): the node
		// is forgotten, not read again.
		c.drop(ref.Rel)
		c.notify()
		return nil
	}
	var err error
	if ref.kind == watchData && c.pol.isItemFlag(ref.Rel) {
		// A flag others write changed (a failover claim, or a failover
		// run's Complete): the container is read first, so a reader that
		// sees the flag's new state sees the container's Stat of that
		// transaction or later (the epoch after a failover run derives
		// from it), and its children too: the failover
		// run's Complete deleted running and wrote its time, which no
		// watch reports.
		c.mu.RLock()
		n := c.nodes[parentRel(ref.Rel)]
		loaded := n != nil && !n.stub
		c.mu.RUnlock()
		if loaded {
			if err := c.readItem(ctx, parentRel(ref.Rel)); err != nil {
				return err
			}
		}
	}
	if ref.kind == watchData {
		err = c.reloadData(ctx, ref.Rel)
	} else {
		err = c.reloadChildren(ctx, ref.Rel)
	}
	if err == nil {
		c.notify()
	}
	return err
}

// unwanted reports whether the policy no longer asks for the watch ref of
// an ordinary node (not the root, an item's, nor Versioned).
func (p Policy) unwanted(ref WatchRef) bool {
	rel := ref.Rel
	if rel == "" || rel == p.Versioned || rel == p.Items || strings.HasPrefix(rel, p.Items+"/") {
		return false
	}
	d, k := p.Node(rel)
	return ref.kind == watchData && !d || ref.kind == watchChildren && !k
}

// ErrResyncNeeded: a watch of the cache ended without its event (the
// session expired, the store closed): what it kept may be stale, and the
// owner must Resync.
var ErrResyncNeeded = errors.New("treecache: needs a resync")

// itemReaders bounds the reads of item containers in flight (coord's item
// scans keep as many).
const itemReaders = 512

// itemOf decodes an item container's name (canonical decimal).
func itemOf(name string) (int, bool) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || strconv.Itoa(n) != name {
		return 0, false
	}
	return n, true
}

func (c *Cache) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// Changed returns a channel closed at the next change; take it before
// reading the state it guards.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// Has reports whether rel exists, per its parent's children list.
func (c *Cache) Has(rel string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.hasLocked(rel)
}

func (c *Cache) hasLocked(rel string) bool {
	if rel == "" {
		n := c.nodes[""]
		return n != nil && !n.stub
	}
	p := c.nodes[parentRel(rel)]
	if p == nil {
		return false
	}
	_, ok := slices.BinarySearch(p.children, rel[strings.LastIndexByte(rel, '/')+1:])
	return ok
}

// NoteItemStat records st as the Stat of the item container rel when it is
// loaded and st is not older than what the cache holds.
func (c *Cache) NoteItemStat(rel string, st store.Stat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[rel]; n != nil && !n.stub && st.Mzxid >= n.stat.Mzxid {
		n.stat = st
	}
}

// Get returns rel's cached data and stat.
func (c *Cache) Get(rel string) ([]byte, store.Stat, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p := parentRel(rel); p == c.pol.Versioned && p != "" {
		// A child of pol.Versioned: kept on its parent (no Stat).
		if pn := c.nodes[p]; pn != nil {
			if i, ok := slices.BinarySearch(pn.children, rel[len(p)+1:]); ok {
				return []byte(pn.kidData[i]), store.Stat{}, true
			}
		}
		return nil, store.Stat{}, false
	}
	n := c.nodes[rel]
	if n == nil || !n.hasData || !c.hasLocked(rel) {
		return nil, store.Stat{}, false
	}
	return n.data, n.stat, true
}

// LoadedData returns the data of a node the cache has loaded with a data
// watch, whether or not its parent's children are loaded yet (a join
// loads a few nodes before the rest; get asks the parent's list).
func (c *Cache) LoadedData(rel string) ([]byte, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n := c.nodes[rel]; n != nil && n.hasData && !n.stub {
		return n.data, true
	}
	return nil, false
}

// DataStat returns the Stat of a node whose data the cache keeps (a data
// watch), without asking its parent's children: the config node's parent
// (the job root) keeps no children list.
func (c *Cache) DataStat(rel string) (store.Stat, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n := c.nodes[rel]; n != nil && n.hasData {
		return n.stat, true
	}
	return store.Stat{}, false
}

// Children returns rel's cached children names, sorted.
func (c *Cache) Children(rel string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n := c.nodes[rel]; n != nil {
		return slices.Clone(n.children)
	}
	return nil
}

// Listing returns rel's cached children with the Stat of the same read
// (its data version, say), as one direct listing would have returned them
// at some earlier time: for a reader that fences what it decides on them
// by a version check of rel in its transaction, which fails if rel
// changed since (a children-watched node whose every writer bumps its data
// version: Begin's flag and failover directories). A write-through
// (NoteCreated, NoteDeleted) changes the children and not the Stat: the
// owner's own committed change, after which the pair is the store's if
// the owner did not bump the version, and fails the check if it did.
// false: not loaded with a watched listing, or a resync is unfinished
// (read directly then).
func (c *Cache) Listing(rel string) ([]string, store.Stat, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[rel]
	if c.partial || n == nil || n.stub || n.listStat == nil {
		return nil, store.Stat{}, false
	}
	return slices.Clone(n.children), *n.listStat, true
}

// NoteListing records a direct listing of rel (names, read with st) when
// the cache has rel listed and st is newer (its data or children version
// ahead, neither behind): a version bump with no child created or deleted
// fires no children watch, and Listing would return the older pair until
// the next one. Only for a node whose children the policy keeps nothing
// of (else ignored): their loads are the watched listing's.
func (c *Cache) NoteListing(rel string, names []string, st store.Stat) {
	for _, name := range names {
		if d, k := c.pol.Node(joinRel(rel, name)); d || k {
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[rel]
	if c.partial || n == nil || n.stub || n.listStat == nil {
		return
	}
	old := *n.listStat
	if st.Version < old.Version || st.Cversion < old.Cversion || st.Version == old.Version && st.Cversion == old.Cversion {
		return
	}
	n.children = slices.Sorted(slices.Values(names))
	n.listStat = &st
}

// NoteCreated and NoteDeleted write our own committed changes through to
// the children lists, so the next read sees them before the watch fires.
func (c *Cache) NoteCreated(rels ...string) {
	c.mu.Lock()
	c.writes++
	// Each parent's children are copied once per call (readers may hold
	// the old slice), not once per created node: a transaction creating
	// thousands of siblings would copy the list thousands of times.
	copied := map[*cnode]bool{}
	for _, rel := range rels {
		if c.pol.Versioned != "" && parentRel(rel) == c.pol.Versioned {
			continue // followed by its parent's watch only
		}
		p := c.nodes[parentRel(rel)]
		if p == nil {
			// The parent was created in the same transaction.
			if _, children := c.pol.Node(parentRel(rel)); !children || c.nodes[parentRel(parentRel(rel))] == nil {
				continue
			}
			p = &cnode{stub: true}
			c.nodes[parentRel(rel)] = p
			c.stubs[parentRel(rel)] = true
		}
		name := rel[strings.LastIndexByte(rel, '/')+1:]
		if i, ok := slices.BinarySearch(p.children, name); !ok {
			if !copied[p] {
				p.children = slices.Clone(p.children)
				copied[p] = true
			}
			p.children = slices.Insert(p.children, i, name)
		}
	}
	stubs := len(c.stubs) > 0
	c.mu.Unlock()
	c.notify()
	if stubs {
		c.kick()
	}
}

// LoadStubs loads the nodes known only from our own writes; watcher only.
func (c *Cache) LoadStubs(ctx context.Context) error {
	c.mu.Lock()
	var rels []string
	for rel := range c.stubs {
		if n := c.nodes[rel]; n != nil && n.stub {
			rels = append(rels, rel)
		}
	}
	clear(c.stubs)
	c.mu.Unlock()
	return c.loadAll(ctx, rels)
}

// NoteDeleted records the owner's own deletes of rels (write-through),
// ahead of their watches; see NoteCreated.
// NoteDeleted writes the owner's own committed deletes through (see
// NoteCreated).
func (c *Cache) NoteDeleted(rels ...string) {
	c.mu.Lock()
	c.writes++
	for _, rel := range rels {
		p := c.nodes[parentRel(rel)]
		if p == nil || c.pol.Versioned != "" && parentRel(rel) == c.pol.Versioned {
			continue
		}
		name := rel[strings.LastIndexByte(rel, '/')+1:]
		if i, ok := slices.BinarySearch(p.children, name); ok {
			p.children = slices.Delete(slices.Clone(p.children), i, i+1)
		}
		if !c.pol.isItemFlag(rel) {
			dropTree(c.nodes, rel)
		}
	}
	c.mu.Unlock()
	c.notify()
}

// WaitFor blocks until cond (evaluated on the cache) holds or ctx ends.
func (c *Cache) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		ch := c.Changed()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

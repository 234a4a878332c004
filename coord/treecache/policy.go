package treecache

// Policy is what a Cache keeps of its subtree, and with which watches: its
// owner decides it, the cache only follows it. Paths are relative to the
// cache's root ("" is the root).
type Policy struct {
	// Roots are the nodes a resync loads (with what Node keeps below them).
	Roots []string
	// Node says which watches the node at rel gets: a data watch (its data
	// and Stat are kept) and a children watch (its children list is kept,
	// so their existence is known).
	Node func(rel string) (data, children bool)
	// Items is the directory of per-item containers (Items/{item}, item a
	// decimal number): a container's children are read once without a
	// watch and kept current by write-through (the owner writes them at
	// every run); the flags under it in ItemFlags get existence watches
	// (Node must ask for them too).
	Items     string
	ItemFlags []string
	// OwnRel is the node whose data lists the items the owner runs
	// (decoded by OwnItems): only those, and the ones Claimed reports, are
	// loaded and watched under Items, so a trigger on S servers costs each
	// server re-arms for its own items. "": every item.
	OwnRel string
	// OwnItems decodes OwnRel's data; an error: no item is the owner's.
	// Required with OwnRel.
	OwnItems func(data []byte) ([]int, error)
	// Versioned is a node whose children (and their data) are kept without
	// watches of their own: every writer of a child bumps the node's data
	// version in the same transaction, so the node's one data watch stands
	// for all of them (see VersionedFields). "": none.
	Versioned string
	// VersionedCopy decodes Versioned's data when it is a copy of its
	// children (name to data) written with them; false: read the children.
	// nil: never.
	VersionedCopy func(data []byte) (map[string]string, bool)
	// Claimed reports an item the owner runs beyond OwnRel's list (a
	// failover claim). It is called with the cache's lock held and must not
	// call back into the cache. nil: none.
	Claimed func(item int) bool
}

// Package txn writes a job's transactions: intents (a write by path
// relative to the job's root, some conditional on the node's existence)
// resolved against the job's tree cache and committed in one Multi, or in
// parts below the store's request limit when they grow with the items
// (split.go).
package txn

import (
	"context"
	"errors"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// Kind says how an Intent becomes a Multi operation.
type Kind int

const (
	// Create creates the node; its existence is an error.
	Create Kind = iota + 1
	// CreateIfAbsent creates the node unless it exists.
	CreateIfAbsent
	// Put sets the node's data, creating it when absent.
	Put
	// Set sets an existing node's data; absence is an error.
	Set
	// Delete deletes the node; absence is an error (a fenced delete).
	Delete
	// DeleteIfPresent deletes the node if it exists.
	DeleteIfPresent
	// Check asserts the node's version.
	Check
	// DeleteIfPresentRead deletes the node if it exists, asking the
	// store, never the cache: for a node whose lagging cache entry must
	// not leave it behind.
	DeleteIfPresentRead
)

// Committer writes a job's intents (Intent): resolved against the tree
// cache, in one Multi, or in parts beyond the store's request limit
// (split.go). It holds only what that needs: the store, the job's paths
// and its cache. It is safe for concurrent use (its fields never change).
type Committer struct {
	st    store.Store
	p     layout.JobPaths
	cache *treecache.Cache
}

// NewCommitter returns the committer of the job at p over st, resolving
// against cache.
func NewCommitter(st store.Store, p layout.JobPaths, cache *treecache.Cache) Committer {
	return Committer{st: st, p: p, cache: cache}
}

// Intent is one write of a transaction, by path relative to the job root.
// Conditional intents (IfAbsent, Put, IfPresent) are resolved against the
// tree cache, so the steady state needs no reads; if the cache was stale the
// Multi fails and commit resolves them again with direct reads.
type Intent struct {
	Kind    Kind
	Rel     string     // the node's path relative to the job's root
	Data    []byte     // Create, CreateIfAbsent, Put, Set
	Mode    store.Mode // Create, CreateIfAbsent
	Version int32      // Check
}

// Commit applies intents in ONE Multi and writes the outcome through to
// the cache. The first plan resolves the conditional intents from the cache
// (no reads in the steady state); when the Multi shows the cache lagged, or
// another process created or deleted a node meanwhile, multiRetry plans
// again with direct reads. An empty resolution is no call.
func (c *Committer) Commit(ctx context.Context, intents []Intent) error {
	_, err := c.commit(ctx, intents, false)
	return err
}

// Written is the version of each node a transaction created (0) or set,
// by absolute path, as its Multi left it: a version-unique fence of the
// writer's (protocol.Run.Fence checks them at these versions).
type Written map[string]int32

// commit is Commit returning, when written is set, what its Multi created
// and set (nil otherwise: most writers need not pay for the map).
func (c *Committer) commit(ctx context.Context, intents []Intent, written bool) (Written, error) {
	var created, deleted []string
	var last []store.Op
	res, err := layout.MultiRetryResults(ctx, c.st, func(ctx context.Context, attempt int) ([]store.Op, error) {
		var readErr error
		exists := func(rel string, direct bool) bool {
			// Nodes of items the cache does not watch are read directly.
			if attempt == 0 && !direct && c.cache.Known(rel) {
				return c.cache.Has(rel)
			}
			ok, _, err := c.st.Exists(ctx, c.p.Abs(rel))
			if err != nil && readErr == nil {
				readErr = err
			}
			return ok
		}
		var ops []store.Op
		ops, created, deleted = c.resolve(intents, exists)
		if readErr != nil {
			return nil, readErr
		}
		last = ops
		return ops, nil
	})
	if err != nil {
		return nil, err
	}
	c.cache.NoteCreated(created...)
	c.cache.NoteDeleted(deleted...)
	if !written {
		return nil, nil
	}
	w := make(Written, len(last))
	for i, op := range last {
		switch o := op.(type) {
		case *store.CreateOp:
			w[o.Path] = 0
		case *store.SetOp:
			if i < len(res) {
				w[o.Path] = res[i].Stat.Version
			}
		}
	}
	return w, nil
}

// resolve turns intents into operations, exists answering for the nodes
// (direct: ask the store, never the cache); created and deleted are the
// nodes the operations create and delete, for the cache.
func (c *Committer) resolve(intents []Intent, exists func(rel string, direct bool) bool) (ops []store.Op, created, deleted []string) {
	// pending tracks creations and deletions earlier in the same Multi.
	pending := map[string]bool{}
	has := func(rel string) bool {
		if v, ok := pending[rel]; ok {
			return v
		}
		return exists(rel, false)
	}
	for _, in := range intents {
		p := c.p.Abs(in.Rel)
		switch in.Kind {
		case Create:
			ops = append(ops, &store.CreateOp{Path: p, Data: in.Data, Mode: in.Mode})
			pending[in.Rel] = true
			created = append(created, in.Rel)
		case CreateIfAbsent:
			if !has(in.Rel) {
				ops = append(ops, &store.CreateOp{Path: p, Data: in.Data, Mode: in.Mode})
				pending[in.Rel] = true
				created = append(created, in.Rel)
			}
		case Put:
			exists := has(in.Rel)
			ops = append(ops, layout.PutOp(p, in.Data, exists))
			if !exists {
				pending[in.Rel] = true
				created = append(created, in.Rel)
			}
		case Set:
			ops = append(ops, &store.SetOp{Path: p, Data: in.Data, Version: store.AnyVersion})
		case Delete:
			ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
			pending[in.Rel] = false
			deleted = append(deleted, in.Rel)
		case DeleteIfPresent:
			if has(in.Rel) {
				ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
				pending[in.Rel] = false
				deleted = append(deleted, in.Rel)
			}
		case DeleteIfPresentRead:
			v, ok := pending[in.Rel]
			if !ok {
				v = exists(in.Rel, true)
			}
			if v {
				ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
				pending[in.Rel] = false
				deleted = append(deleted, in.Rel)
			}
		case Check:
			ops = append(ops, &store.CheckOp{Path: p, Version: in.Version})
		}
	}
	return ops, created, deleted
}

// Ambiguous reports whether err, from a write, leaves it unknown whether the
// write was applied: the connection or the session failed, or ctx ended,
// while it was in flight.
func Ambiguous(st store.Store, err error) bool {
	return recipe.LostConnection(st, err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

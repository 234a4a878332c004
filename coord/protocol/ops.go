package protocol

import (
	"context"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/treecache"
)

// intentKind says how an intent becomes a Multi operation.
type intentKind int

const (
	// opCreate creates the node; its existence is an error.
	opCreate intentKind = iota + 1
	// opCreateIfAbsent creates the node unless it exists.
	opCreateIfAbsent
	// opPut sets the node's data, creating it when absent.
	opPut
	// opSet sets an existing node's data; absence is an error.
	opSet
	// opDelete deletes the node; absence is an error (a fenced delete).
	opDelete
	// opDeleteIfPresent deletes the node if it exists.
	opDeleteIfPresent
	// opCheck asserts the node's version.
	opCheck
	// opDeleteIfPresentRead deletes the node if it exists, asking the
	// store, never the cache: for a node whose lagging cache entry must
	// not leave it behind.
	opDeleteIfPresentRead
)

// committer writes a job's intents (intent): resolved against the tree
// cache, in one Multi, or in parts beyond the store's request limit
// (split.go). It holds only what that needs: the store, the job's paths
// and its cache.
type committer struct {
	st    store.Store
	p     layout.JobPaths
	cache *treecache.Cache
}

// intent is one write of a transaction, by path relative to the job root.
// Conditional intents (IfAbsent, Put, IfPresent) are resolved against the
// tree cache, so the steady state needs no reads; if the cache was stale the
// Multi fails and commit resolves them again with direct reads.
type intent struct {
	kind    intentKind
	rel     string
	data    []byte
	mode    store.Mode
	version int32
}

// commit applies intents in ONE Multi and writes the outcome through to
// the cache. The first plan resolves the conditional intents from the cache
// (no reads in the steady state); when the Multi shows the cache lagged, or
// another process created or deleted a node meanwhile, multiRetry plans
// again with direct reads. An empty resolution is no call.
func (c *committer) commit(ctx context.Context, intents []intent) error {
	var created, deleted []string
	err := layout.MultiRetry(ctx, c.st, func(ctx context.Context, attempt int) ([]store.Op, error) {
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
		return ops, nil
	})
	if err != nil {
		return err
	}
	c.cache.NoteCreated(created...)
	c.cache.NoteDeleted(deleted...)
	return nil
}

func (c *committer) resolve(intents []intent, exists func(rel string, direct bool) bool) (ops []store.Op, created, deleted []string) {
	// pending tracks creations and deletions earlier in the same Multi.
	pending := map[string]bool{}
	has := func(rel string) bool {
		if v, ok := pending[rel]; ok {
			return v
		}
		return exists(rel, false)
	}
	for _, in := range intents {
		p := c.p.Abs(in.rel)
		switch in.kind {
		case opCreate:
			ops = append(ops, &store.CreateOp{Path: p, Data: in.data, Mode: in.mode})
			pending[in.rel] = true
			created = append(created, in.rel)
		case opCreateIfAbsent:
			if !has(in.rel) {
				ops = append(ops, &store.CreateOp{Path: p, Data: in.data, Mode: in.mode})
				pending[in.rel] = true
				created = append(created, in.rel)
			}
		case opPut:
			exists := has(in.rel)
			ops = append(ops, layout.PutOp(p, in.data, exists))
			if !exists {
				pending[in.rel] = true
				created = append(created, in.rel)
			}
		case opSet:
			ops = append(ops, &store.SetOp{Path: p, Data: in.data, Version: store.AnyVersion})
		case opDelete:
			ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
			pending[in.rel] = false
			deleted = append(deleted, in.rel)
		case opDeleteIfPresent:
			if has(in.rel) {
				ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
				pending[in.rel] = false
				deleted = append(deleted, in.rel)
			}
		case opDeleteIfPresentRead:
			v, ok := pending[in.rel]
			if !ok {
				v = exists(in.rel, true)
			}
			if v {
				ops = append(ops, &store.DeleteOp{Path: p, Version: store.AnyVersion})
				pending[in.rel] = false
				deleted = append(deleted, in.rel)
			}
		case opCheck:
			ops = append(ops, &store.CheckOp{Path: p, Version: in.version})
		}
	}
	return ops, created, deleted
}

package zkstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// full maps a store path to the ZooKeeper path under Root.
func (s *Store) full(p string) string {
	if s.cfg.Root == "" {
		return p
	}
	if p == "/" {
		return s.cfg.Root
	}
	return s.cfg.Root + p
}

// strip maps a ZooKeeper path under Root back to a store path.
func (s *Store) strip(p string) string {
	if s.cfg.Root == "" {
		return p
	}
	if p == s.cfg.Root {
		return "/"
	}
	if len(p) > len(s.cfg.Root) && p[:len(s.cfg.Root)] == s.cfg.Root && p[len(s.cfg.Root)] == '/' {
		return p[len(s.cfg.Root):]
	}
	return p
}

func zkFlags(m store.Mode) (int32, error) {
	switch m {
	case store.Persistent:
		return zk.FlagPersistent, nil
	case store.Ephemeral:
		return zk.FlagEphemeral, nil
	case store.PersistentSequential:
		return zk.FlagSequence, nil
	case store.EphemeralSequential:
		return zk.FlagEphemeral | zk.FlagSequence, nil
	}
	return 0, fmt.Errorf("zkstore: unknown %v; use one of the store.Mode constants", m)
}

func toStat(st *zk.Stat) store.Stat {
	if st == nil {
		return store.Stat{}
	}
	return store.Stat{
		Czxid:          st.Czxid,
		Mzxid:          st.Mzxid,
		Pzxid:          st.Pzxid,
		Ctime:          time.UnixMilli(st.Ctime),
		Mtime:          time.UnixMilli(st.Mtime),
		Version:        st.Version,
		Cversion:       st.Cversion,
		EphemeralOwner: st.EphemeralOwner,
		NumChildren:    st.NumChildren,
	}
}

// Create makes a node carrying the store's ACL and returns its store path
// (with ZooKeeper's 10-digit suffix for sequential modes). The parent must
// exist (ErrNoParent); ephemeral parents refuse children (ErrEphemeralChild).
func (s *Store) Create(ctx context.Context, path string, data []byte, mode store.Mode) (string, error) {
	if err := store.ValidatePath(path); err != nil {
		return "", err
	}
	flags, err := zkFlags(mode)
	if err != nil {
		return "", err
	}
	var created string
	c, err := s.call(ctx, func(c *client) error {
		p, err := c.conn.Create(s.full(path), data, flags, s.cfg.aclFor(path))
		created = p
		return err
	}, nil)
	if err != nil {
		return "", s.mapErr(c, "create", path, err)
	}
	return s.strip(created), nil
}

// Get returns a node's data and stat.
func (s *Store) Get(ctx context.Context, path string) ([]byte, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return nil, store.Stat{}, err
	}
	var data []byte
	var st *zk.Stat
	c, err := s.call(ctx, func(c *client) error {
		var err error
		data, st, err = c.conn.Get(s.full(path))
		return err
	}, nil)
	if err != nil {
		return nil, store.Stat{}, s.mapErr(c, "get", path, err)
	}
	return data, toStat(st), nil
}

// GetW is Get plus a one-shot watch that fires on the node's next data
// change or deletion, or with EventNotWatching when the session expires or
// the store closes. On error no watch is armed.
func (s *Store) GetW(ctx context.Context, path string) ([]byte, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	data, st, err := s.getW(ctx, path, fire)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return data, st, ch, nil
}

// GetWFunc is GetW with the event delivered to fn; see store.FuncWatcher.
func (s *Store) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	return s.getW(ctx, path, onceFunc(fn))
}

func (s *Store) getW(ctx context.Context, path string, fire store.WatchFunc) ([]byte, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return nil, store.Stat{}, err
	}
	full := s.full(path)
	var data []byte
	var st *zk.Stat
	var w *watch
	c, err := s.call(ctx, func(c *client) error {
		w = s.watches.add(full, path, watchData, c.gen, fire)
		var err error
		data, st, _, err = c.conn.GetW(full)
		if err != nil {
			s.watches.remove(full, w)
		}
		return err
	}, func() { s.watches.remove(full, w) })
	if err != nil {
		return nil, store.Stat{}, s.mapErr(c, "get", path, err)
	}
	return data, toStat(st), nil
}

// Exists reports whether a node exists; a missing node is not an error.
func (s *Store) Exists(ctx context.Context, path string) (bool, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return false, store.Stat{}, err
	}
	var ok bool
	var st *zk.Stat
	c, err := s.call(ctx, func(c *client) error {
		var err error
		ok, st, err = c.conn.Exists(s.full(path))
		return err
	}, nil)
	if err != nil {
		return false, store.Stat{}, s.mapErr(c, "exists", path, err)
	}
	if !ok {
		return false, store.Stat{}, nil
	}
	return true, toStat(st), nil
}

// ExistsW is Exists plus a one-shot watch: on an existing node it fires on
// data change or deletion, on a missing node on creation; EventNotWatching
// when the session expires or the store closes.
func (s *Store) ExistsW(ctx context.Context, path string) (bool, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	ok, st, err := s.existsW(ctx, path, fire)
	if err != nil {
		return false, store.Stat{}, nil, err
	}
	return ok, st, ch, nil
}

// ExistsWFunc is ExistsW with the event delivered to fn; see
// store.FuncWatcher.
func (s *Store) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	return s.existsW(ctx, path, onceFunc(fn))
}

func (s *Store) existsW(ctx context.Context, path string, fire store.WatchFunc) (bool, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return false, store.Stat{}, err
	}
	full := s.full(path)
	var ok bool
	var st *zk.Stat
	var w *watch
	c, err := s.call(ctx, func(c *client) error {
		w = s.watches.add(full, path, watchExist, c.gen, fire)
		var err error
		ok, st, _, err = c.conn.ExistsW(full)
		if err != nil {
			s.watches.remove(full, w)
		}
		return err
	}, func() { s.watches.remove(full, w) })
	if err != nil {
		return false, store.Stat{}, s.mapErr(c, "exists", path, err)
	}
	if !ok {
		return false, store.Stat{}, nil
	}
	return true, toStat(st), nil
}

// Children lists a node's direct children's names, sorted.
func (s *Store) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return nil, store.Stat{}, err
	}
	var names []string
	var st *zk.Stat
	c, err := s.call(ctx, func(c *client) error {
		var err error
		names, st, err = c.conn.Children(s.full(path))
		return err
	}, nil)
	if err != nil {
		return nil, store.Stat{}, s.mapErr(c, "children", path, err)
	}
	slices.Sort(names)
	return names, toStat(st), nil
}

// ChildrenW is Children plus a one-shot watch that fires on the next child
// creation or deletion, or the node's deletion; EventNotWatching when the
// session expires or the store closes.
func (s *Store) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, <-chan store.Event, error) {
	ch, fire := chanWatch()
	names, st, err := s.childrenW(ctx, path, fire)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return names, st, ch, nil
}

// ChildrenWFunc is ChildrenW with the event delivered to fn; see
// store.FuncWatcher.
func (s *Store) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
	return s.childrenW(ctx, path, onceFunc(fn))
}

func (s *Store) childrenW(ctx context.Context, path string, fire store.WatchFunc) ([]string, store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return nil, store.Stat{}, err
	}
	full := s.full(path)
	var names []string
	var st *zk.Stat
	var w *watch
	c, err := s.call(ctx, func(c *client) error {
		w = s.watches.add(full, path, watchChild, c.gen, fire)
		var err error
		names, st, _, err = c.conn.ChildrenW(full)
		if err != nil {
			s.watches.remove(full, w)
		}
		return err
	}, func() { s.watches.remove(full, w) })
	if err != nil {
		return nil, store.Stat{}, s.mapErr(c, "children", path, err)
	}
	slices.Sort(names)
	return names, toStat(st), nil
}

// Set replaces a node's data if its version matches (store.AnyVersion
// matches any) and returns the new stat.
func (s *Store) Set(ctx context.Context, path string, data []byte, version int32) (store.Stat, error) {
	if err := store.ValidatePath(path); err != nil {
		return store.Stat{}, err
	}
	var st *zk.Stat
	c, err := s.call(ctx, func(c *client) error {
		var err error
		st, err = c.conn.Set(s.full(path), data, version)
		return err
	}, nil)
	if err != nil {
		return store.Stat{}, s.mapErr(c, "set", path, err)
	}
	return toStat(st), nil
}

// Delete removes a childless node if its version matches (store.AnyVersion
// matches any). The root cannot be deleted (ErrBadPath).
func (s *Store) Delete(ctx context.Context, path string, version int32) error {
	if err := store.ValidatePath(path); err != nil {
		return err
	}
	if path == "/" {
		return fmt.Errorf("%w: the root %q cannot be deleted", store.ErrBadPath, path)
	}
	c, err := s.call(ctx, func(c *client) error {
		return c.conn.Delete(s.full(path), version)
	}, nil)
	return s.mapErr(c, "delete", path, err)
}

// Sync makes later reads on this session see every write committed before
// Sync was called (ZooKeeper's sync on path).
func (s *Store) Sync(ctx context.Context, path string) error {
	if err := store.ValidatePath(path); err != nil {
		return err
	}
	c, err := s.call(ctx, func(c *client) error {
		_, err := c.conn.Sync(s.full(path))
		return err
	}, nil)
	return s.mapErr(c, "sync", path, err)
}

// Multi applies all operations atomically in one ZooKeeper transaction, or
// none: then the error is a *store.MultiError naming the first operation
// that failed (not the ones ZooKeeper reports as rolled back), unwrapping to
// its store sentinel. A connection problem returns a plain error
// (ErrConnectionLoss: the outcome is unknown). An empty Multi is a no-op.
//
// Multis made at the same time on this session are committed together in
// a few combined requests (coord/store/groupcommit), unless
// Config.NoGroupCommit: requests of one job never share one, and each
// caller gets its own outcome as above.
func (s *Store) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if s.commits != nil {
		return s.commits.Multi(ctx, ops...)
	}
	return s.multi(ctx, ops...)
}

// GroupCommitStats returns st's group committer's counters (zero with
// Config.NoGroupCommit): how many Multis it was given and in how many
// requests it sent them. A function, not a method: zkstore.Store is at
// its method budget (TestLayerLimits).
func GroupCommitStats(st *Store) groupcommit.Stats {
	if st.commits == nil {
		return groupcommit.Stats{}
	}
	return st.commits.Stats()
}

// multi sends ops as one ZooKeeper multi request.
func (s *Store) multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	reqs := make([]any, len(ops))
	for i, op := range ops {
		req, err := s.zkOp(op)
		if err != nil {
			return nil, &store.MultiError{Index: i, Op: op, Err: err}
		}
		reqs[i] = req
	}
	var res []zk.MultiResponse
	c, err := s.call(ctx, func(c *client) error {
		var err error
		res, err = c.conn.Multi(reqs...)
		return err
	}, nil)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			// Abandoned: the call's goroutine may still be writing res.
			return nil, s.mapErr(c, "multi", store.OpPath(ops[0]), err)
		}
		if i := firstFailure(res); i >= 0 && len(res) == len(ops) {
			return nil, &store.MultiError{Index: i, Op: ops[i], Err: s.mapErr(c, opName(ops[i]), store.OpPath(ops[i]), res[i].Error)}
		}
		return nil, s.mapErr(c, "multi", store.OpPath(ops[0]), err)
	}
	out := make([]store.OpResult, len(ops))
	for i, op := range ops {
		switch o := op.(type) {
		case *store.CreateOp:
			out[i] = store.OpResult{Path: s.strip(res[i].String)}
		case *store.SetOp:
			out[i] = store.OpResult{Path: o.Path, Stat: toStat(res[i].Stat)}
		default:
			out[i] = store.OpResult{Path: store.OpPath(op)}
		}
	}
	return out, nil
}

// zkOp converts a store operation to a go-zookeeper multi request.
func (s *Store) zkOp(op store.Op) (any, error) {
	if op == nil {
		return nil, fmt.Errorf("zkstore: nil operation; use *store.CreateOp, *store.SetOp, *store.DeleteOp or *store.CheckOp")
	}
	if err := store.ValidatePath(store.OpPath(op)); err != nil {
		return nil, err
	}
	switch o := op.(type) {
	case *store.CreateOp:
		flags, err := zkFlags(o.Mode)
		if err != nil {
			return nil, err
		}
		return &zk.CreateRequest{Path: s.full(o.Path), Data: o.Data, Acl: s.cfg.aclFor(o.Path), Flags: flags}, nil
	case *store.SetOp:
		return &zk.SetDataRequest{Path: s.full(o.Path), Data: o.Data, Version: o.Version}, nil
	case *store.DeleteOp:
		if o.Path == "/" {
			return nil, fmt.Errorf("%w: the root %q cannot be deleted", store.ErrBadPath, o.Path)
		}
		return &zk.DeleteRequest{Path: s.full(o.Path), Version: o.Version}, nil
	case *store.CheckOp:
		return &zk.CheckVersionRequest{Path: s.full(o.Path), Version: o.Version}, nil
	}
	return nil, fmt.Errorf("zkstore: unsupported operation %T; use *store.CreateOp, *store.SetOp, *store.DeleteOp or *store.CheckOp", op)
}

// firstFailure returns the index of the operation that made a multi fail.
// ZooKeeper answers a failed multi with one error result per operation:
// OK for those before the culprit, the culprit's code, then
// RuntimeInconsistency ("rolled back") for those after it. go-zookeeper
// maps OK to nil and the unnamed code -2 to an "unknown error", so the
// first non-nil error that is not a rollback marker is the culprit.
func firstFailure(res []zk.MultiResponse) int {
	first := -1
	for i, r := range res {
		if r.Error == nil {
			continue
		}
		if first < 0 {
			first = i
		}
		if !isRollback(r.Error) {
			return i
		}
	}
	return first
}

// errRuntimeInconsistency is the text go-zookeeper gives ZooKeeper's code
// -2, which marks the operations of a failed multi after the culprit.
var errRuntimeInconsistency = zk.ErrCode(-2)

func isRollback(err error) bool {
	return err.Error() == fmt.Sprintf("unknown error: %v", errRuntimeInconsistency)
}

func opName(op store.Op) string {
	switch op.(type) {
	case *store.CreateOp:
		return "create"
	case *store.SetOp:
		return "set"
	case *store.DeleteOp:
		return "delete"
	case *store.CheckOp:
		return "check"
	}
	return "multi"
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// statCols are the columns of a node's store.Stat, in scanStat's order.
const statCols = "n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime, n.version, n.cversion, n.ephemeral_owner, n.num_children"

// nullStat scans the stat columns of a node that may be missing (LEFT JOIN).
type nullStat struct {
	czxid, mzxid, pzxid, owner *int64
	ctime, mtime               *time.Time
	version, cversion, nchild  *int32
}

func (n *nullStat) dest() []any {
	return []any{&n.czxid, &n.mzxid, &n.pzxid, &n.ctime, &n.mtime, &n.version, &n.cversion, &n.owner, &n.nchild}
}

func (n *nullStat) exists() bool { return n.czxid != nil }

func (n *nullStat) stat() store.Stat {
	if !n.exists() {
		return store.Stat{}
	}
	return store.Stat{
		Czxid: *n.czxid, Mzxid: *n.mzxid, Pzxid: *n.pzxid,
		Ctime: n.ctime.UTC(), Mtime: n.mtime.UTC(),
		Version: *n.version, Cversion: *n.cversion,
		EphemeralOwner: *n.owner, NumChildren: *n.nchild,
	}
}

// readResult is one read: the node (if it exists), its data and children
// when asked, and the zxid of the last transaction the read saw.
type readResult struct {
	ns       nullStat
	data     []byte
	children []string
	seen     int64
}

// read reads path in one statement, so node, children and the zxid seen
// are one snapshot: a watch armed on it fires on any later transaction.
func (s *Store) read(ctx context.Context, what, p string, data, children bool) (*readResult, error) {
	if err := store.ValidatePath(p); err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", what, err)
	}
	sel := "SELECT (SELECT zxid FROM " + s.q + ".txn WHERE id = 1), " + statCols
	r := &readResult{}
	dest := append([]any{&r.seen}, r.ns.dest()...)
	if data {
		sel += ", n.data"
		dest = append(dest, &r.data)
	}
	if children {
		sel += ", ARRAY(SELECT c.path FROM " + s.q + ".nodes c WHERE c.parent = n.path)"
		dest = append(dest, &r.children)
	}
	sel += " FROM (SELECT 1) d LEFT JOIN " + s.q + ".nodes n ON n.path = $1"
	if err := s.pool.QueryRow(ctx, sel, p).Scan(dest...); err != nil {
		return nil, s.mapErr(ctx, what+" "+p, err)
	}
	for i, c := range r.children {
		r.children[i] = store.Base(c)
	}
	slices.Sort(r.children)
	if r.data == nil {
		r.data = []byte{}
	}
	return r, nil
}

// arm registers a watch of kind on the read r and, when transactions after
// the read were dispatched before the watch was armed, checks the node
// itself for a change it would have missed.
func (s *Store) arm(ctx context.Context, gen uint64, kind store.WatchKind, p string, r *readResult, fn store.WatchFunc) {
	w := &watch{kind: kind, path: p, since: r.seen, existed: r.ns.exists(), gen: gen, fire: store.OnceFunc(fn)}
	last, ok := s.reg.add(w)
	if !ok || last <= r.seen {
		return
	}
	if err := s.checkWatch(ctx, s.pool, w); err != nil {
		// Unknown: a spurious event makes the caller re-read.
		s.reg.fireIfArmed(w, store.Event{Type: store.EventNodeDataChanged, Path: p})
	}
}

type token struct {
	id  int64
	gen uint64
}

// enter is begin plus the session generation of the watches the call arms.
func (s *Store) enter(ctx context.Context, what string) (token, context.Context, func(), error) {
	gen := s.reg.generation()
	id, cctx, end, err := s.begin(ctx, what)
	return token{id: id, gen: gen}, cctx, end, err
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, p string) ([]byte, store.Stat, error) {
	return s.get(ctx, p, nil)
}

// GetW implements store.Store.
func (s *Store) GetW(ctx context.Context, p string) ([]byte, store.Stat, <-chan store.Event, error) {
	ch, fn := store.ChanWatch()
	data, st, err := s.get(ctx, p, fn)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return data, st, ch, nil
}

// GetWFunc implements store.FuncWatcher.
func (s *Store) GetWFunc(ctx context.Context, p string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	return s.get(ctx, p, fn)
}

func (s *Store) get(ctx context.Context, p string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	tk, ctx, end, err := s.enter(ctx, "get "+p)
	if err != nil {
		return nil, store.Stat{}, err
	}
	defer end()
	r, err := s.read(ctx, "get", p, true, false)
	if err != nil {
		return nil, store.Stat{}, err
	}
	s.recordRead(ctx, p, r.ns.exists(), r.ns.stat())
	if !r.ns.exists() {
		return nil, store.Stat{}, fmt.Errorf("pgstore: get %s: %w", p, store.ErrNoNode)
	}
	if fn != nil {
		s.arm(ctx, tk.gen, store.WatchData, p, r, fn)
	}
	return r.data, r.ns.stat(), nil
}

// Exists implements store.Store.
func (s *Store) Exists(ctx context.Context, p string) (bool, store.Stat, error) {
	return s.exists(ctx, p, nil)
}

// ExistsW implements store.Store.
func (s *Store) ExistsW(ctx context.Context, p string) (bool, store.Stat, <-chan store.Event, error) {
	ch, fn := store.ChanWatch()
	ok, st, err := s.exists(ctx, p, fn)
	if err != nil {
		return false, store.Stat{}, nil, err
	}
	return ok, st, ch, nil
}

// ExistsWFunc implements store.FuncWatcher.
func (s *Store) ExistsWFunc(ctx context.Context, p string, fn store.WatchFunc) (bool, store.Stat, error) {
	return s.exists(ctx, p, fn)
}

func (s *Store) exists(ctx context.Context, p string, fn store.WatchFunc) (bool, store.Stat, error) {
	tk, ctx, end, err := s.enter(ctx, "exists "+p)
	if err != nil {
		return false, store.Stat{}, err
	}
	defer end()
	r, err := s.read(ctx, "exists", p, false, false)
	if err != nil {
		return false, store.Stat{}, err
	}
	s.recordRead(ctx, p, r.ns.exists(), r.ns.stat())
	if fn != nil {
		s.arm(ctx, tk.gen, store.WatchExist, p, r, fn)
	}
	return r.ns.exists(), r.ns.stat(), nil
}

// Children implements store.Store.
func (s *Store) Children(ctx context.Context, p string) ([]string, store.Stat, error) {
	return s.children(ctx, p, nil)
}

// ChildrenW implements store.Store.
func (s *Store) ChildrenW(ctx context.Context, p string) ([]string, store.Stat, <-chan store.Event, error) {
	ch, fn := store.ChanWatch()
	names, st, err := s.children(ctx, p, fn)
	if err != nil {
		return nil, store.Stat{}, nil, err
	}
	return names, st, ch, nil
}

// ChildrenWFunc implements store.FuncWatcher.
func (s *Store) ChildrenWFunc(ctx context.Context, p string, fn store.WatchFunc) ([]string, store.Stat, error) {
	return s.children(ctx, p, fn)
}

func (s *Store) children(ctx context.Context, p string, fn store.WatchFunc) ([]string, store.Stat, error) {
	tk, ctx, end, err := s.enter(ctx, "children "+p)
	if err != nil {
		return nil, store.Stat{}, err
	}
	defer end()
	r, err := s.read(ctx, "children", p, false, true)
	if err != nil {
		return nil, store.Stat{}, err
	}
	if !r.ns.exists() {
		return nil, store.Stat{}, fmt.Errorf("pgstore: children %s: %w", p, store.ErrNoNode)
	}
	if fn != nil {
		s.arm(ctx, tk.gen, store.WatchChild, p, r, fn)
	}
	return r.children, r.ns.stat(), nil
}

// Sync implements store.Store. Every read goes to the primary and sees
// every committed transaction, so Sync is one round trip that proves the
// path to it works.
func (s *Store) Sync(ctx context.Context, p string) error {
	if err := store.ValidatePath(p); err != nil {
		return fmt.Errorf("pgstore: sync: %w", err)
	}
	_, ctx, end, err := s.begin(ctx, "sync "+p)
	if err != nil {
		return err
	}
	defer end()
	_, err = s.pool.Exec(ctx, "SELECT 1")
	return s.mapErr(ctx, "sync "+p, err)
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, p string, data []byte, mode store.Mode) (string, error) {
	res, err := s.multi(ctx, "create "+p, []store.Op{&store.CreateOp{Path: p, Data: data, Mode: mode}})
	if err != nil {
		return "", unwrapSingle(err)
	}
	return res[0].Path, nil
}

// Set implements store.Store.
func (s *Store) Set(ctx context.Context, p string, data []byte, version int32) (store.Stat, error) {
	res, err := s.multi(ctx, "set "+p, []store.Op{&store.SetOp{Path: p, Data: data, Version: version}})
	if err != nil {
		return store.Stat{}, unwrapSingle(err)
	}
	return res[0].Stat, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, p string, version int32) error {
	_, err := s.multi(ctx, "delete "+p, []store.Op{&store.DeleteOp{Path: p, Version: version}})
	return unwrapSingle(err)
}

// unwrapSingle turns the MultiError of a one-op call into the op's error.
func unwrapSingle(err error) error {
	var me *store.MultiError
	if errors.As(err, &me) {
		return me.Err
	}
	return err
}

// Multi implements store.Store: every op in one transaction, all or
// nothing; a refused op fails it with a *store.MultiError.
func (s *Store) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	return s.multi(ctx, "multi", ops)
}

func (s *Store) multi(ctx context.Context, what string, ops []store.Op) ([]store.OpResult, error) {
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return nil, &store.MultiError{Index: i, Op: op, Err: fmt.Errorf("pgstore: %s: %w", what, err)}
		}
	}
	n := store.MultiSize(ops)
	if n > s.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("pgstore: multi of %d operations, about %d bytes, over the %d-byte limit (Config.MaxRequestBytes): %w", len(ops), n, s.cfg.MaxRequestBytes, store.ErrTooLarge)
	}
	tk, ctx, end, err := s.enter(ctx, what)
	if err != nil {
		return nil, err
	}
	defer end()
	return s.write(ctx, what, tk.id, ops)
}

// refusals maps the reasons multi_batch gives a refused request
// ("index:reason") to the store's errors.
var refusals = map[string]error{
	"exists":         store.ErrNodeExists,
	"noparent":       store.ErrNoParent,
	"ephemeralchild": store.ErrEphemeralChild,
	"nonode":         store.ErrNoNode,
	"badversion":     store.ErrBadVersion,
	"notempty":       store.ErrNotEmpty,
}

func opName(op store.Op) string {
	switch op.(type) {
	case *store.CreateOp:
		return "create"
	case *store.SetOp:
		return "set"
	case *store.DeleteOp:
		return "delete"
	}
	return "check"
}

func validateOp(op store.Op) error {
	switch o := op.(type) {
	case *store.CreateOp:
		if o.Mode < store.Persistent || o.Mode > store.EphemeralSequential {
			return fmt.Errorf("create %s: unknown %v; use one of the store.Mode constants", o.Path, o.Mode)
		}
		return store.ValidatePath(o.Path)
	case *store.SetOp:
		return store.ValidatePath(o.Path)
	case *store.DeleteOp:
		if o.Path == "/" {
			return fmt.Errorf("%w: the root cannot be deleted", store.ErrBadPath)
		}
		return store.ValidatePath(o.Path)
	case *store.CheckOp:
		return store.ValidatePath(o.Path)
	case nil:
		return errors.New("nil op")
	}
	return fmt.Errorf("unknown op %T; use *store.CreateOp, *store.SetOp, *store.DeleteOp or *store.CheckOp", op)
}

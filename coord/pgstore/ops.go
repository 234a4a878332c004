package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

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
func (s *Store) arm(ctx context.Context, gen uint64, kind watchKind, p string, r *readResult, fn store.WatchFunc) {
	w := &watch{kind: kind, path: p, since: r.seen, existed: r.ns.exists(), gen: gen, fire: onceFunc(fn)}
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
func (s *Store) enter(ctx context.Context, what string) (token, error) {
	gen := s.reg.generation()
	id, err := s.begin(ctx, what)
	return token{id: id, gen: gen}, err
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, p string) ([]byte, store.Stat, error) {
	return s.get(ctx, p, nil)
}

// GetW implements store.Store.
func (s *Store) GetW(ctx context.Context, p string) ([]byte, store.Stat, <-chan store.Event, error) {
	ch, fn := chanWatch()
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
	tk, err := s.enter(ctx, "get "+p)
	if err != nil {
		return nil, store.Stat{}, err
	}
	defer s.calls.Done()
	r, err := s.read(ctx, "get", p, true, false)
	if err != nil {
		return nil, store.Stat{}, err
	}
	if !r.ns.exists() {
		return nil, store.Stat{}, fmt.Errorf("pgstore: get %s: %w", p, store.ErrNoNode)
	}
	if fn != nil {
		s.arm(ctx, tk.gen, watchData, p, r, fn)
	}
	return r.data, r.ns.stat(), nil
}

// Exists implements store.Store.
func (s *Store) Exists(ctx context.Context, p string) (bool, store.Stat, error) {
	return s.exists(ctx, p, nil)
}

// ExistsW implements store.Store.
func (s *Store) ExistsW(ctx context.Context, p string) (bool, store.Stat, <-chan store.Event, error) {
	ch, fn := chanWatch()
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
	tk, err := s.enter(ctx, "exists "+p)
	if err != nil {
		return false, store.Stat{}, err
	}
	defer s.calls.Done()
	r, err := s.read(ctx, "exists", p, false, false)
	if err != nil {
		return false, store.Stat{}, err
	}
	if fn != nil {
		s.arm(ctx, tk.gen, watchExist, p, r, fn)
	}
	return r.ns.exists(), r.ns.stat(), nil
}

// Children implements store.Store.
func (s *Store) Children(ctx context.Context, p string) ([]string, store.Stat, error) {
	return s.children(ctx, p, nil)
}

// ChildrenW implements store.Store.
func (s *Store) ChildrenW(ctx context.Context, p string) ([]string, store.Stat, <-chan store.Event, error) {
	ch, fn := chanWatch()
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
	tk, err := s.enter(ctx, "children "+p)
	if err != nil {
		return nil, store.Stat{}, err
	}
	defer s.calls.Done()
	r, err := s.read(ctx, "children", p, false, true)
	if err != nil {
		return nil, store.Stat{}, err
	}
	if !r.ns.exists() {
		return nil, store.Stat{}, fmt.Errorf("pgstore: children %s: %w", p, store.ErrNoNode)
	}
	if fn != nil {
		s.arm(ctx, tk.gen, watchChild, p, r, fn)
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
	if _, err := s.begin(ctx, "sync "+p); err != nil {
		return err
	}
	defer s.calls.Done()
	_, err := s.pool.Exec(ctx, "SELECT 1")
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
	if n := store.MultiSize(ops); n > s.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("pgstore: multi of %d operations, about %d bytes, over the %d-byte limit (Config.MaxRequestBytes): %w", len(ops), n, s.cfg.MaxRequestBytes, store.ErrTooLarge)
	}
	tk, err := s.enter(ctx, what)
	if err != nil {
		return nil, err
	}
	defer s.calls.Done()
	var res []store.OpResult
	err = s.txn(ctx, what, tk.id, func(ctx context.Context, ts *txState) error {
		res = make([]store.OpResult, len(ops))
		for i, op := range ops {
			r, err := s.apply(ctx, ts, tk.id, op)
			if err != nil {
				if isStoreErr(err) {
					return &store.MultiError{Index: i, Op: op, Err: err}
				}
				return s.mapErr(ctx, what, err)
			}
			res[i] = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func isStoreErr(err error) bool {
	for _, e := range []error{store.ErrNoNode, store.ErrNodeExists, store.ErrBadVersion, store.ErrNotEmpty, store.ErrEphemeralChild, store.ErrNoParent, store.ErrBadPath} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
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

// apply runs one op in ts.
func (s *Store) apply(ctx context.Context, ts *txState, sess int64, op store.Op) (store.OpResult, error) {
	switch o := op.(type) {
	case *store.CreateOp:
		p, err := s.create(ctx, ts, sess, o)
		return store.OpResult{Path: p}, err
	case *store.SetOp:
		st, err := s.set(ctx, ts, o)
		return store.OpResult{Path: o.Path, Stat: st}, err
	case *store.DeleteOp:
		return store.OpResult{Path: o.Path}, s.delete(ctx, ts, o)
	case *store.CheckOp:
		return store.OpResult{Path: o.Path}, s.check(ctx, ts, o.Path, o.Version)
	}
	return store.OpResult{}, fmt.Errorf("unknown op %T", op)
}

func (s *Store) create(ctx context.Context, ts *txState, sess int64, o *store.CreateOp) (string, error) {
	if o.Path == "/" {
		return "", fmt.Errorf("pgstore: create /: %w", store.ErrNodeExists)
	}
	parent := store.Parent(o.Path)
	var owner int64
	var seq int32
	err := ts.tx.QueryRow(ctx, "SELECT ephemeral_owner, seq FROM "+s.q+".nodes WHERE path = $1", parent).Scan(&owner, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("pgstore: create %s: parent %s: %w", o.Path, parent, store.ErrNoParent)
	}
	if err != nil {
		return "", err
	}
	if owner != 0 {
		return "", fmt.Errorf("pgstore: create %s: parent %s is ephemeral: %w", o.Path, parent, store.ErrEphemeralChild)
	}
	p := o.Path
	if o.Mode.IsSequential() {
		p = fmt.Sprintf("%s%010d", o.Path, seq)
	}
	var eph int64
	if o.Mode.IsEphemeral() {
		eph = sess
	}
	data := o.Data
	if data == nil {
		data = []byte{}
	}
	tag, err := ts.tx.Exec(ctx, "INSERT INTO "+s.q+".nodes (path, parent, data, czxid, mzxid, pzxid, ctime, mtime, ephemeral_owner)"+
		" VALUES ($1, $2, $3, $4, $4, $4, $5, $5, $6) ON CONFLICT (path) DO NOTHING", p, parent, data, ts.zxid, ts.now, eph)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("pgstore: create %s: %w", p, store.ErrNodeExists)
	}
	if _, err := ts.tx.Exec(ctx, "UPDATE "+s.q+".nodes SET num_children = num_children + 1, cversion = cversion + 1, pzxid = $2, seq = seq + 1 WHERE path = $1",
		parent, ts.zxid); err != nil {
		return "", err
	}
	ts.event(store.EventNodeCreated, p)
	ts.event(store.EventNodeChildrenChanged, parent)
	return p, nil
}

func (s *Store) set(ctx context.Context, ts *txState, o *store.SetOp) (store.Stat, error) {
	data := o.Data
	if data == nil {
		data = []byte{}
	}
	var ns nullStat
	err := ts.tx.QueryRow(ctx, "UPDATE "+s.q+".nodes n SET data = $2, version = n.version + 1, mzxid = $3, mtime = $4"+
		" WHERE n.path = $1 AND ($5 = -1 OR n.version = $5) RETURNING "+statCols,
		o.Path, data, ts.zxid, ts.now, o.Version).Scan(ns.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.check(ctx, ts, o.Path, store.AnyVersion); err != nil {
			return store.Stat{}, err
		}
		return store.Stat{}, fmt.Errorf("pgstore: set %s version %d: %w", o.Path, o.Version, store.ErrBadVersion)
	}
	if err != nil {
		return store.Stat{}, err
	}
	ts.event(store.EventNodeDataChanged, o.Path)
	return ns.stat(), nil
}

func (s *Store) delete(ctx context.Context, ts *txState, o *store.DeleteOp) error {
	var version, nchild int32
	err := ts.tx.QueryRow(ctx, "SELECT version, num_children FROM "+s.q+".nodes WHERE path = $1", o.Path).Scan(&version, &nchild)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: delete %s: %w", o.Path, store.ErrNoNode)
	}
	if err != nil {
		return err
	}
	if o.Version != store.AnyVersion && o.Version != version {
		return fmt.Errorf("pgstore: delete %s version %d (is %d): %w", o.Path, o.Version, version, store.ErrBadVersion)
	}
	if nchild > 0 {
		return fmt.Errorf("pgstore: delete %s (%d children): %w", o.Path, nchild, store.ErrNotEmpty)
	}
	parent := store.Parent(o.Path)
	b := &pgx.Batch{}
	b.Queue("DELETE FROM "+s.q+".nodes WHERE path = $1", o.Path)
	b.Queue("UPDATE "+s.q+".nodes SET num_children = num_children - 1, cversion = cversion + 1, pzxid = $2 WHERE path = $1", parent, ts.zxid)
	if err := ts.tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	ts.event(store.EventNodeDeleted, o.Path)
	ts.event(store.EventNodeChildrenChanged, parent)
	return nil
}

func (s *Store) check(ctx context.Context, ts *txState, p string, want int32) error {
	var version int32
	err := ts.tx.QueryRow(ctx, "SELECT version FROM "+s.q+".nodes WHERE path = $1", p).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: check %s: %w", p, store.ErrNoNode)
	}
	if err != nil {
		return err
	}
	if want != store.AnyVersion && want != version {
		return fmt.Errorf("pgstore: check %s version %d (is %d): %w", p, want, version, store.ErrBadVersion)
	}
	return nil
}

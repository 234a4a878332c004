package memstore

import (
	"fmt"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
)

// txn is one ZooKeeper transaction: every node it touches gets the same zxid
// (a Multi is one transaction), watches fire only when it commits, and
// rollback undoes its changes in reverse order.
type txn struct {
	srv      *Server
	zxid     int64
	undo     []func()
	triggers []trigger
}

// trigger is a watch-table lookup to perform at commit.
type trigger struct {
	path  string
	kind  watchKind
	event store.EventType
}

func (s *Server) begin() *txn {
	return &txn{srv: s, zxid: s.zxid + 1}
}

// commit makes the transaction's zxid current and fires its watches. A
// transaction that changed nothing consumes no zxid.
func (t *txn) commit() {
	if len(t.undo) > 0 {
		t.srv.zxid = t.zxid
	}
	for _, tr := range t.triggers {
		t.srv.fireLocked(tr.path, tr.kind, tr.event)
	}
}

// rollback undoes every change; no watch fires.
func (t *txn) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
}

// validate checks a path for an operation; sequential creates may end in "/"
// (the suffix becomes the last element), as in ZooKeeper.
func validate(op, p string, sequential bool) error {
	check := p
	if sequential {
		check = p + "0"
	}
	if err := store.ValidatePath(check); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("memstore: %s %q: %w: contains a NUL byte", op, p, store.ErrBadPath)
	}
	return nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (t *txn) create(owner int64, p string, data []byte, mode store.Mode) (string, error) {
	if err := validate("create", p, mode.IsSequential()); err != nil {
		return "", err
	}
	if p == "/" {
		return "", fmt.Errorf("memstore: create %q: %w", p, store.ErrNodeExists)
	}
	s := t.srv
	parentPath := store.Parent(p)
	parent := s.nodes[parentPath]
	if parent == nil {
		return "", fmt.Errorf("memstore: create %q: parent %q: %w", p, parentPath, store.ErrNoParent)
	}
	if mode.IsSequential() {
		p = fmt.Sprintf("%s%010d", p, parent.seq)
	}
	if s.nodes[p] != nil {
		return "", fmt.Errorf("memstore: create %q: %w", p, store.ErrNodeExists)
	}
	if parent.stat.EphemeralOwner != 0 {
		return "", fmt.Errorf("memstore: create %q: parent %q is ephemeral: %w", p, parentPath, store.ErrEphemeralChild)
	}
	now := s.clock()
	n := &node{
		data: cloneBytes(data),
		stat: store.Stat{
			Czxid: t.zxid, Mzxid: t.zxid, Pzxid: t.zxid,
			Ctime: now, Mtime: now,
		},
		children: make(map[string]struct{}),
	}
	if mode.IsEphemeral() {
		n.stat.EphemeralOwner = owner
	}
	oldParentStat, oldSeq := parent.stat, parent.seq
	name := store.Base(p)
	s.nodes[p] = n
	parent.children[name] = struct{}{}
	parent.seq++
	parent.stat.Cversion++
	parent.stat.Pzxid = t.zxid
	parent.stat.NumChildren++
	if owner != 0 && mode.IsEphemeral() {
		eph := s.ephemerals[owner]
		if eph == nil {
			eph = make(map[string]struct{})
			s.ephemerals[owner] = eph
		}
		eph[p] = struct{}{}
	}
	t.undo = append(t.undo, func() {
		delete(s.nodes, p)
		delete(parent.children, name)
		parent.stat, parent.seq = oldParentStat, oldSeq
		if mode.IsEphemeral() {
			delete(s.ephemerals[owner], p)
		}
	})
	t.triggers = append(t.triggers,
		trigger{p, dataWatch, store.EventNodeCreated},
		trigger{parentPath, childWatch, store.EventNodeChildrenChanged})
	return p, nil
}

func (t *txn) set(p string, data []byte, version int32) (store.Stat, error) {
	if err := validate("set", p, false); err != nil {
		return store.Stat{}, err
	}
	n := t.srv.nodes[p]
	if n == nil {
		return store.Stat{}, fmt.Errorf("memstore: set %q: %w", p, store.ErrNoNode)
	}
	if version != store.AnyVersion && version != n.stat.Version {
		return store.Stat{}, fmt.Errorf("memstore: set %q: expected version %d, node has %d: %w", p, version, n.stat.Version, store.ErrBadVersion)
	}
	oldData, oldStat := n.data, n.stat
	n.data = cloneBytes(data)
	n.stat.Version++
	n.stat.Mzxid = t.zxid
	n.stat.Mtime = t.srv.clock()
	t.undo = append(t.undo, func() { n.data, n.stat = oldData, oldStat })
	t.triggers = append(t.triggers, trigger{p, dataWatch, store.EventNodeDataChanged})
	return n.stat, nil
}

func (t *txn) delete(p string, version int32) error {
	if err := validate("delete", p, false); err != nil {
		return err
	}
	if p == "/" {
		return fmt.Errorf("memstore: delete %q: the root cannot be deleted: %w", p, store.ErrBadPath)
	}
	s := t.srv
	n := s.nodes[p]
	if n == nil {
		return fmt.Errorf("memstore: delete %q: %w", p, store.ErrNoNode)
	}
	if version != store.AnyVersion && version != n.stat.Version {
		return fmt.Errorf("memstore: delete %q: expected version %d, node has %d: %w", p, version, n.stat.Version, store.ErrBadVersion)
	}
	if len(n.children) > 0 {
		return fmt.Errorf("memstore: delete %q: %d children: %w", p, len(n.children), store.ErrNotEmpty)
	}
	t.remove(p, n)
	return nil
}

// remove unlinks a childless node that is known to exist.
func (t *txn) remove(p string, n *node) {
	s := t.srv
	parentPath := store.Parent(p)
	parent := s.nodes[parentPath]
	name := store.Base(p)
	oldParentStat := parent.stat
	owner := n.stat.EphemeralOwner
	delete(s.nodes, p)
	delete(parent.children, name)
	parent.stat.Cversion++
	parent.stat.Pzxid = t.zxid
	parent.stat.NumChildren--
	if owner != 0 {
		delete(s.ephemerals[owner], p)
	}
	t.undo = append(t.undo, func() {
		s.nodes[p] = n
		parent.children[name] = struct{}{}
		parent.stat = oldParentStat
		if owner != 0 {
			if eph := s.ephemerals[owner]; eph != nil {
				eph[p] = struct{}{}
			}
		}
	})
	t.triggers = append(t.triggers,
		trigger{p, dataWatch, store.EventNodeDeleted},
		trigger{p, childWatch, store.EventNodeDeleted},
		trigger{parentPath, childWatch, store.EventNodeChildrenChanged})
}

func (t *txn) check(p string, version int32) error {
	if err := validate("check", p, false); err != nil {
		return err
	}
	n := t.srv.nodes[p]
	if n == nil {
		return fmt.Errorf("memstore: check %q: %w", p, store.ErrNoNode)
	}
	if version != store.AnyVersion && version != n.stat.Version {
		return fmt.Errorf("memstore: check %q: expected version %d, node has %d: %w", p, version, n.stat.Version, store.ErrBadVersion)
	}
	return nil
}

// dropEphemeralsLocked deletes every ephemeral node of a session in one
// transaction, firing other sessions' watches, as ZooKeeper's closeSession.
func (s *Server) dropEphemeralsLocked(id int64) {
	eph := s.ephemerals[id]
	delete(s.ephemerals, id)
	if len(eph) == 0 {
		return
	}
	t := s.begin()
	for p := range eph {
		if n := s.nodes[p]; n != nil && n.stat.EphemeralOwner == id {
			t.remove(p, n)
		}
	}
	t.commit()
}

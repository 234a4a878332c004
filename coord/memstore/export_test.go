package memstore

import (
	"fmt"

	"github.com/shardflow/shardflow/coord/store"
)

// CheckInvariants verifies the tree's internal consistency; tests call it
// after concurrent chaos.
func (s *Server) CheckInvariants() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, n := range s.nodes {
		if int(n.stat.NumChildren) != len(n.children) {
			return fmt.Errorf("%s: NumChildren %d, %d children", p, n.stat.NumChildren, len(n.children))
		}
		if n.stat.Cversion < n.stat.NumChildren {
			return fmt.Errorf("%s: Cversion %d below NumChildren %d", p, n.stat.Cversion, n.stat.NumChildren)
		}
		if n.stat.Mzxid < n.stat.Czxid || n.stat.Mzxid > s.zxid {
			return fmt.Errorf("%s: Czxid %d Mzxid %d, last zxid %d", p, n.stat.Czxid, n.stat.Mzxid, s.zxid)
		}
		for c := range n.children {
			if s.nodes[store.Join(p, c)] == nil {
				return fmt.Errorf("%s lists missing child %s", p, c)
			}
		}
		if p == "/" {
			continue
		}
		parent := s.nodes[store.Parent(p)]
		if parent == nil {
			return fmt.Errorf("%s has no parent", p)
		}
		if _, ok := parent.children[store.Base(p)]; !ok {
			return fmt.Errorf("%s not listed by its parent", p)
		}
		if parent.stat.EphemeralOwner != 0 {
			return fmt.Errorf("%s is the child of an ephemeral", p)
		}
		if o := n.stat.EphemeralOwner; o != 0 {
			if s.sessions[o] == nil {
				return fmt.Errorf("%s owned by dead session 0x%x", p, o)
			}
			if _, ok := s.ephemerals[o][p]; !ok {
				return fmt.Errorf("%s missing from the ephemerals of 0x%x", p, o)
			}
		}
	}
	for id, paths := range s.ephemerals {
		for p := range paths {
			if n := s.nodes[p]; n == nil || n.stat.EphemeralOwner != id {
				return fmt.Errorf("ephemerals of 0x%x list %s, not an ephemeral of it", id, p)
			}
		}
	}
	for _, table := range []map[string]map[*watch]struct{}{s.dataWatches, s.childWatches} {
		for p, ws := range table {
			for w := range ws {
				if w.path != p {
					return fmt.Errorf("watch on %s filed under %s", w.path, p)
				}
				if _, ok := w.owner.watches[w]; !ok {
					return fmt.Errorf("watch on %s unknown to its session", p)
				}
				if !w.owner.live || w.owner.closed {
					return fmt.Errorf("watch on %s of a dead session", p)
				}
			}
		}
	}
	return nil
}

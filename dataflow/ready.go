package dataflow

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/store"
)

// ErrNotReady is what Ready wraps: the Node cannot do its work now. The
// wrapping error says why (not started, stopping, the coordination session
// not connected, a job joining or not registered) and what to look at.
var ErrNotReady = errors.New("dataflow: node not ready")

// Ready reports whether the Node is doing its work: started and not
// stopping, its coordination session connected, and this server registered
// on that session for every job it hosts (none still joining). It returns
// nil when ready, otherwise an error wrapping ErrNotReady that names the
// reason, e.g. "coordination session suspended". It makes no store call and
// takes no lock a run holds, so a readiness probe may call it as often as it
// likes (package health serves it as /readyz).
//
// A Node stays not ready while its store is unreachable (its items may be
// failing over to other servers) and turns ready again by itself once the
// session is back and every job has re-registered. A Node whose Stop has
// begun is never ready again: Kubernetes takes a draining pod out of its
// Service at once.
func (n *Node) Ready() error {
	select {
	case <-n.life.Started():
	default:
		return fmt.Errorf("%w: not started (call Node.Start)", ErrNotReady)
	}
	if n.halt.Err() != nil {
		return fmt.Errorf("%w: stopping (Node.Stop was called: draining runs, leaving the cluster)", ErrNotReady)
	}
	sess, _ := n.st.Session()
	if sess.State != store.StateConnected {
		return fmt.Errorf("%w: coordination session %s: the store is unreachable or the session expired; check the --coord / ZooKeeper addresses and the network (the session reconnects by itself)", ErrNotReady, sess.State)
	}
	n.mu.Lock()
	var joining, unregistered []string
	for name, h := range n.jobs {
		switch {
		case h == nil:
			joining = append(joining, name)
		case !h.cj.Registered():
			unregistered = append(unregistered, name)
		}
	}
	n.mu.Unlock()
	if len(joining) > 0 {
		slices.Sort(joining)
		return fmt.Errorf("%w: joining job(s) %q", ErrNotReady, joining)
	}
	if len(unregistered) > 0 {
		slices.Sort(unregistered)
		return fmt.Errorf("%w: not registered on the current session for job(s) %q (re-registering after a session change, or shut down by an operator: see shardflow status)", ErrNotReady, unregistered)
	}
	return nil
}

package layout

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/shardflow/shardflow/coord/store"
)

// writeAttempts bounds the read-plan-write loop of multiRetry. Each retry
// follows a concurrent writer's successful create or delete of one of the
// nodes, and the nodes a plan reads are created once and deleted rarely, so
// a handful of attempts converges even with every process of a fleet
// joining at the same instant.
const WriteAttempts = 8

// multiRetry is the one way coord writes nodes that other processes may
// create or delete at the same time: plan reads the nodes it needs and
// returns the operations of ONE Multi; when the Multi fails because a node
// was created (ErrNodeExists) or deleted (ErrNoNode, or ErrNoParent for a
// create under it) or changed version
// (ErrBadVersion) since plan read it, plan runs again on fresh reads, at most
// writeAttempts times. A plan that returns no operations ends the loop
// without a call. It stops early, returning the store's error, when a new
// plan is the same as the one that just failed: the conflict is then not a
// race but the plan's own precondition (say, a create of a node that must
// not exist).
func MultiRetry(ctx context.Context, st store.Store, plan func(ctx context.Context, attempt int) ([]store.Op, error)) error {
	_, err := MultiRetryResults(ctx, st, plan)
	return err
}

// multiRetryResults is multiRetry returning the results of the Multi that
// succeeded (nil when the last plan had no operations).
func MultiRetryResults(ctx context.Context, st store.Store, plan func(ctx context.Context, attempt int) ([]store.Op, error)) ([]store.OpResult, error) {
	var prev []store.Op
	var err error
	for attempt := range WriteAttempts {
		ops, perr := plan(ctx, attempt)
		if perr != nil {
			return nil, perr
		}
		if len(ops) == 0 {
			return nil, nil
		}
		if attempt > 0 && reflect.DeepEqual(ops, prev) {
			return nil, err
		}
		var res []store.OpResult
		if res, err = st.Multi(ctx, ops...); err == nil {
			return res, nil
		}
		if !Raced(err) {
			return nil, err
		}
		prev = ops
	}
	return nil, fmt.Errorf("coord: %d attempts lost to concurrent writers: %w", WriteAttempts, err)
}

// raced reports whether a Multi failed because the nodes it planned on
// changed under it.
func Raced(err error) bool {
	return errors.Is(err, store.ErrNodeExists) || errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrNoParent) || errors.Is(err, store.ErrBadVersion)
}

// putOps plans the create-or-set of each path to its data (persistent
// nodes): one Exists per path decides between CreateOp and SetOp.
func PutOps(ctx context.Context, st store.Store, paths []string, data [][]byte) ([]store.Op, error) {
	ops := make([]store.Op, 0, len(paths))
	for i, p := range paths {
		ok, _, err := st.Exists(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("coord: read %s: %w", p, err)
		}
		ops = append(ops, PutOp(p, data[i], ok))
	}
	return ops, nil
}

// PutOp is the create-or-set of path to data (a persistent node) for a
// plan that knows whether the node exists: a set of any version if it
// does, a create if not. A plan that read wrong fails its Multi and plans
// again (MultiRetry).
func PutOp(path string, data []byte, exists bool) store.Op {
	if exists {
		return &store.SetOp{Path: path, Data: data, Version: store.AnyVersion}
	}
	return &store.CreateOp{Path: path, Data: data, Mode: store.Persistent}
}

// put sets path's data, creating the node if it is absent, correct under
// concurrent writers of the same node (the last writer wins).
func Put(ctx context.Context, st store.Store, path string, data []byte) error {
	err := MultiRetry(ctx, st, func(ctx context.Context, _ int) ([]store.Op, error) {
		return PutOps(ctx, st, []string{path}, [][]byte{data})
	})
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", path, err)
	}
	return nil
}

// touchMembership is the operation every membership change (a server
// registering, going offline, being disabled, enabled or shut down)
// includes in its transaction: it bumps the data version of the servers
// node. The leader's reshard checks that version in its own transaction,
// so a reshard planned on a membership that changed meanwhile fails and is
// planned again instead of clearing the flag on a stale view. (A crashed
// server's status node vanishes without it; the leader's watcher raises
// the flag for those, see raiseIfMembershipChanged.)
func TouchMembership(p JobPaths) store.Op {
	return &store.SetOp{Path: p.Abs(NServers), Version: store.AnyVersion}
}

// raiseFlag raises the resharding flag (leader/sharding/necessary) by a
// direct transaction that also bumps the data version of leader/sharding
// (the flag version). Begin's transaction checks the flag version it read
// when it found no flag: a Begin that looked before the flag went up cannot
// mark its items running after it. The leader scans for running items only
// after it has seen the flag, so without the check such a Begin's run would
// escape the scan and the reshard would move its items while it runs (see
// awaitSharding). A flag already up is success.
func RaiseFlag(ctx context.Context, st store.Store, p JobPaths) error {
	_, err := st.Multi(ctx, RaiseFlagOps(p)...)
	if err != nil && !errors.Is(err, store.ErrNodeExists) {
		return err
	}
	return nil
}

// ItemReaders is how many per-item reads a scan of the items (a status
// read, the leader's failover scan) keeps in flight. A job of thousands of
// items costs one children listing per item (plus a read per timestamp in
// a status); one session pipelines them (go-zookeeper has no multi-read),
// so the scan takes about (requests / ItemReaders) round trips.
const ItemReaders = 512

// RaiseFlagOps are the operations that raise the resharding flag, for
// RaiseFlag and for the transactions that raise it among other writes: the
// flag's create and the bump of the flag version (leader/sharding's data
// version), which Begin's transaction checks (see RaiseFlag).
func RaiseFlagOps(p JobPaths) []store.Op {
	return []store.Op{&store.CreateOp{Path: p.Abs(RelNecessary)},
		&store.SetOp{Path: p.Abs(RelShardingDir), Version: store.AnyVersion}}
}

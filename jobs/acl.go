package jobs

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// aclStore is the capability of a store with ACLs (zkstore): a worker that
// authenticates refuses a stored job anyone may rewrite.
type aclStore interface {
	Authenticated() bool
	WorldWritable(ctx context.Context, path string) (bool, error)
}

// checkDefinitionACL refuses a stored job whose definition (its node,
// config node or a config field) anyone may change, when this worker's
// store authenticates: such a job may have been written or rewritten by
// anyone who reaches ZooKeeper (a namespace made before --auth, or
// squatted). Stores without ACLs (memstore) are not checked.
func checkDefinitionACL(ctx context.Context, st store.Store, ns, job string) error {
	as, ok := st.(aclStore)
	if !ok || !as.Authenticated() {
		return nil
	}
	paths := []string{store.Join(ns), store.Join(ns, job), store.Join(ns, job, "config")}
	for _, f := range append(jobconfig.FieldNames(), jobconfig.FieldJobType) {
		paths = append(paths, store.Join(ns, job, "config", f))
	}
	for _, p := range paths {
		open, err := as.WorldWritable(ctx, p)
		if err != nil {
			return fmt.Errorf("jobs: job %q: reading the ACL of %s: %w", job, p, err)
		}
		if open {
			return fmt.Errorf("%w: job %q: %s is world-writable, so anyone could have defined or changed it; "+
				"check the job, then run `shardflow acl fix --namespace %s` with the operator's --auth", ErrNotAllowed, job, p, ns)
		}
	}
	return nil
}

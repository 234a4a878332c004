package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/store"
)

// A worker's refusal to run a stored job is an ephemeral node of its
// session, /{namespace}/{job}/refused/{server}, its data the reason
// (docs/zookeeper-layout.md); the operator's status (coord.JobStatus's
// Refused) shows it until the session ends or the refusal is cleared.
const nodeRefused = "refused"

// reportRefused records that server refuses to run job, and why. The job
// must be stored (a refusal never creates its node).
func reportRefused(ctx context.Context, st store.Store, ns, job, server, reason string) error {
	config := store.Join(ns, job, "config")
	ok, _, err := st.Exists(ctx, config)
	if err != nil {
		return fmt.Errorf("jobs: read %s: %w", config, err)
	}
	if !ok {
		return fmt.Errorf("jobs: record refusal of job %q: it is not stored in namespace %q", job, ns)
	}
	dir := store.Join(ns, job, nodeRefused)
	if err := store.CreateAll(ctx, st, dir); err != nil {
		return fmt.Errorf("jobs: create %s: %w", dir, err)
	}
	path := store.Join(dir, server)
	_, err = st.Create(ctx, path, []byte(reason), store.Ephemeral)
	if errors.Is(err, store.ErrNodeExists) {
		_, err = st.Set(ctx, path, []byte(reason), store.AnyVersion)
	}
	if err != nil {
		return fmt.Errorf("jobs: record refusal %s: %w", path, err)
	}
	return nil
}

// clearRefused deletes server's refusal of job; none is fine.
func clearRefused(ctx context.Context, st store.Store, ns, job, server string) error {
	path := store.Join(ns, job, nodeRefused, server)
	if err := st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("jobs: clear refusal %s: %w", path, err)
	}
	return nil
}

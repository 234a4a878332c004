package protocol

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// ReportRefused records, as an ephemeral node of st's session, that server
// refuses to run job (a job stored without code, package jobs) and why;
// status (coord.JobStatus.Refused) shows it until the session ends or
// ClearRefused. The job must be stored: else an error wrapping
// store.ErrNoNode.
func ReportRefused(ctx context.Context, st store.Store, namespace, job, server, reason string) error {
	p := refusedPaths(namespace, job)
	ok, _, err := st.Exists(ctx, p.Abs(layout.NConfig))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
	}
	if !ok {
		return fmt.Errorf("coord: record refusal of job %q in namespace %q: the job is not stored: %w", job, namespace, store.ErrNoNode)
	}
	dir := p.Abs(layout.NRefused)
	if err := store.CreateAll(ctx, st, dir); err != nil {
		return fmt.Errorf("coord: create %s: %w", dir, err)
	}
	path := store.Join(dir, server)
	_, err = st.Create(ctx, path, []byte(reason), store.Ephemeral)
	if errors.Is(err, store.ErrNodeExists) {
		_, err = st.Set(ctx, path, []byte(reason), store.AnyVersion)
	}
	if err != nil {
		return fmt.Errorf("coord: record refusal %s: %w", path, err)
	}
	return nil
}

// ClearRefused deletes server's refusal of job; none is fine.
func ClearRefused(ctx context.Context, st store.Store, namespace, job, server string) error {
	path := store.Join(refusedPaths(namespace, job).Abs(layout.NRefused), server)
	if err := st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: clear refusal %s: %w", path, err)
	}
	return nil
}

// refusedPaths are job's paths in namespace (DefaultNamespace when "").
func refusedPaths(namespace, job string) layout.JobPaths {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return layout.NewJobPaths(namespace, job)
}

package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/store"
)

// JobSteps returns job's steps in its last n workflow runs, newest first
// (whichever job started them): what a job's page shows of its workflow
// runs. A job in no workflow has none.
func JobSteps(ctx context.Context, st store.Store, ns, job string, n int) ([]Step, error) {
	dir := jobPath(ns, job, nWorkflow, nRuns)
	ids, _, err := st.Children(ctx, dir)
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", dir, err)
	}
	slices.SortFunc(ids, func(a, b string) int { return compareRuns(b, a) })
	var out []Step
	for _, id := range ids {
		if len(out) == n {
			break
		}
		s, _, err := ReadStep(ctx, st, ns, job, id)
		if errors.Is(err, store.ErrNoNode) {
			continue // pruned meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

package dataflow

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/workflow"
)

// checkDependsOn checks a job's DependsOn against the namespace before it
// joins: the jobs it names are stored (added to a Node, or `shardflow job
// add`), and it closes no cycle and reaches one first job.
func (n *Node) checkDependsOn(ctx context.Context, cfg JobConfig) error {
	if len(cfg.DependsOn) == 0 {
		return nil
	}
	return workflow.CheckDependsOn(ctx, n.st, n.Namespace(), cfg.JobName, cfg.DependsOn)
}

// linkDependsOn records the effective (stored) config's DependsOn in the
// links its upstream jobs keep to find it.
func (n *Node) linkDependsOn(ctx context.Context, eff JobConfig) error {
	if len(eff.DependsOn) == 0 {
		return nil
	}
	if err := workflow.Link(ctx, n.st, n.Namespace(), eff.JobName, nil, eff.DependsOn); err != nil {
		return fmt.Errorf("link dependsOn: %w", err)
	}
	return nil
}

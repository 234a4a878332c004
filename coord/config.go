package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// An operator's config edit (Admin.SetConfig) and what it implies beyond
// the field.

// setConfig writes one field of job's config: SetConfig's action.
func (a *Admin) setConfig(ctx context.Context, p layout.JobPaths, job, field, value string) error {
	// The config node's version before the fields: the transaction checks
	// it, so the copy it writes never drops a concurrent writer's edit.
	_, cst, err := a.st.Get(ctx, p.Abs(layout.NConfig))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
	}
	fields, err := a.readFields(ctx, p)
	if err != nil {
		return err
	}
	// Start from what decodes; a broken stored config is repaired field by field.
	cur, derr := jobconfig.FromFields(job, fields)
	if derr != nil {
		good := maps.Clone(fields)
		for _, fe := range jobconfig.FieldErrors(derr) {
			delete(good, fe.Field)
		}
		cur, _ = jobconfig.FromFields(job, good)
	}
	next, err := jobconfig.SetField(cur, field, value)
	if err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	if err := explicitPositive(field, value); err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	if err := a.checkDependsOn(ctx, job, field, next); err != nil {
		return fmt.Errorf("coord: set %s: %w", p.Config(field), err)
	}
	newFields := next.Fields()
	if _, err := layout.ConfigFromFields(job, mergeRepaired(fields, newFields, field)); err != nil {
		return fmt.Errorf("coord: set %s: the resulting config is invalid: %w", p.Config(field), err)
	}
	// The field and the config node (its version bumped, its data a copy
	// of every field) together: servers watch only the config node
	// (docs/zookeeper-layout.md).
	err = layout.MultiRetry(ctx, a.st, func(ctx context.Context, attempt int) ([]store.Op, error) {
		stored := fields
		if attempt > 0 {
			// A concurrent writer: its fields, then this one on top.
			var err error
			if _, cst, err = a.st.Get(ctx, p.Abs(layout.NConfig)); err != nil {
				return nil, fmt.Errorf("coord: read %s: %w", p.Abs(layout.NConfig), err)
			}
			if stored, err = a.readFields(ctx, p); err != nil {
				return nil, err
			}
		}
		ops, err := layout.PutOps(ctx, a.st, []string{p.Config(field)}, [][]byte{[]byte(newFields[field])})
		if err != nil {
			return nil, err
		}
		return append(ops, layout.WriteConfigNode(p, mergeRepaired(stored, newFields, field), cst.Version)), nil
	})
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", p.Config(field), err)
	}
	old := fields[field]
	if err := a.linkDependsOn(ctx, job, field, old, next); err != nil {
		return err
	}
	return a.afterConfigSet(ctx, p, field, old, newFields[field], next)
}

// afterConfigSet makes what an edit of field from old to value implies
// beyond the field: a changed total reshards and prunes the items beyond
// it; monitoring or failover turned off clears what failover left queued
// or claimed.
func (a *tree) afterConfigSet(ctx context.Context, p layout.JobPaths, field, old, value string, next jobconfig.Config) error {
	switch field {
	case jobconfig.FieldShardingTotalCount:
		if old != value {
			if err := a.raiseResharding(ctx, p); err != nil {
				return err
			}
			return a.pruneItemsBeyond(ctx, p, next.ShardingTotalCount)
		}
	case jobconfig.FieldMonitorExecution:
		if value == "false" {
			// No failover without monitoring (docs/configuration.md):
			// the queue and the claims no run has taken go (the running
			// nodes of failover runs tell which claims a run holds:
			// those end with their run); claimers and Begins check the
			// edit themselves too. Nothing else is deleted: the live
			// markers of runs begun monitored go with their Complete,
			// and readers consult them only while the config monitors.
			if err := a.clearQueue(ctx, p); err != nil {
				return err
			}
			if err := a.clearIdleClaims(ctx, p); err != nil {
				return err
			}
			return a.bumpFailoverDir(ctx, p)
		}
	case jobconfig.FieldFailover:
		if value == "false" {
			if err := a.clearExecutionNodes(ctx, p, layout.NFailover); err != nil {
				return err
			}
			if err := a.clearQueue(ctx, p); err != nil {
				return err
			}
			return a.bumpFailoverDir(ctx, p)
		}
	}
	return nil
}

// defaultedCounts are the count fields whose 0 in a program's JobConfig
// means "the default"; an operator setting one means a value, so it must be
// > 0 (docs/configuration.md).
var defaultedCounts = map[string]string{
	jobconfig.FieldFetchDataCount:                   "100",
	jobconfig.FieldConcurrentDataProcessThreadCount: "8",
	jobconfig.FieldProcessCountIntervalSeconds:      "300",
	jobconfig.FieldReconcileIntervalSeconds:         "60",
}

// explicitPositive refuses an operator's value <= 0 for a defaulted count.
func explicitPositive(field, value string) error {
	example, ok := defaultedCounts[field]
	if !ok {
		return nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil && n <= 0 {
		return &jobconfig.FieldError{Field: field, Problem: fmt.Sprintf("must be > 0, got %d", n),
			Fix: "give a positive number, e.g. " + example}
	}
	return nil
}

// pruneItemsBeyond deletes the execution nodes of items >= total that no
// server runs now (the leader prunes the others at its next reshard, which
// waits for them), so a lowered total leaves no stale items in the tree or
// in status.
func (a *tree) pruneItemsBeyond(ctx context.Context, p layout.JobPaths, total int) error {
	names, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, n := range names {
		it, ok := layout.ParseItemName(n)
		if !ok || it < total {
			continue
		}
		running, _, err := a.st.Exists(ctx, p.Item(it, layout.NRunning))
		if err != nil {
			return fmt.Errorf("coord: read %s: %w", p.Item(it, layout.NRunning), err)
		}
		if running {
			continue
		}
		if err := layout.PruneItem(ctx, a.st, p, it); err != nil {
			return fmt.Errorf("coord: prune item %d (beyond shardingTotalCount %d): %w", it, total, err)
		}
	}
	return nil
}

// mergeRepaired is the stored fields with field replaced by its new text.
func mergeRepaired(stored, next map[string]string, field string) map[string]string {
	m := maps.Clone(stored)
	m[field] = next[field]
	return m
}

// clearExecutionNodes deletes the node named node of every item.
func (a *tree) clearExecutionNodes(ctx context.Context, p layout.JobPaths, node string) error {
	items, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, it := range items {
		path := store.Join(p.Abs(layout.NExecution), it, node)
		if err := a.st.Delete(ctx, path, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", path, err)
		}
	}
	return nil
}

// clearIdleClaims deletes the failover nodes of items that do not run: a
// claim no run has taken. Each in one Multi asserting that no running node
// exists (created and deleted in it), so a failover run that begins
// meanwhile keeps its claim (its owner must go on skipping the item).
func (a *tree) clearIdleClaims(ctx context.Context, p layout.JobPaths) error {
	items, _, err := a.st.Children(ctx, p.Abs(layout.NExecution))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.NExecution), err)
	}
	for _, it := range items {
		claim := store.Join(p.Abs(layout.NExecution), it, layout.NFailover)
		running := store.Join(p.Abs(layout.NExecution), it, layout.NRunning)
		_, err := a.st.Multi(ctx,
			&store.CreateOp{Path: running, Mode: store.Ephemeral},
			&store.DeleteOp{Path: running, Version: store.AnyVersion},
			&store.DeleteOp{Path: claim, Version: store.AnyVersion})
		if err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: delete %s: %w", claim, err)
		}
	}
	return nil
}

// bumpFailoverDir bumps the failover directory's data version after the
// admin's failover writes (a Begin planned on the claims before them plans
// again: markRunning).
func (a *tree) bumpFailoverDir(ctx context.Context, p layout.JobPaths) error {
	if _, err := a.st.Set(ctx, p.Abs(layout.RelFailoverQ), nil, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		return fmt.Errorf("coord: write %s: %w", p.Abs(layout.RelFailoverQ), err)
	}
	return nil
}

// clearQueue deletes the failover queue's entries.
func (a *tree) clearQueue(ctx context.Context, p layout.JobPaths) error {
	q, _, err := a.st.Children(ctx, p.Abs(layout.RelFailoverQ))
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", p.Abs(layout.RelFailoverQ), err)
	}
	for _, n := range q {
		if err := a.st.Delete(ctx, store.Join(p.Abs(layout.RelFailoverQ), n), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: delete %s: %w", store.Join(p.Abs(layout.RelFailoverQ), n), err)
		}
	}
	return nil
}

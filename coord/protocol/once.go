package protocol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/recipe"
)

// once is Job.Once: this run's phase barrier over the job's current total.
func (j *Job) once(ctx context.Context, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	return j.onceOver(ctx, j.Config().ShardingTotalCount, phase, items, timeout, fn)
}

// once is Run.Once: the phase barrier over the run's items and its config
// snapshot's total.
func (r *Run) once(ctx context.Context, phase string, timeout time.Duration, fn func(context.Context) error) error {
	items := make([]int, len(r.items))
	for i, a := range r.items {
		items[i] = a.Item
	}
	return r.j.onceOver(ctx, r.cfg.ShardingTotalCount, phase, items, timeout, fn)
}

// onceOver runs the phase barrier (recipe.Barrier over guarantee/{phase})
// for items out of 0..total-1, its writes a cut connection stops owed to
// the job's debts. The barrier's sentinels read as coord's: a timeout as
// ErrGuaranteeTimeout, registrations gone with their session as
// ErrSessionLost.
func (j *Job) onceOver(ctx context.Context, total int, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if phase != "started" && phase != "completed" {
		return fmt.Errorf("coord: Once phase %q must be \"started\" or \"completed\"", phase)
	}
	b := recipe.Barrier{
		Store: j.st, Dir: j.p.Abs(layout.NGuarantee + "/" + phase), ID: j.id, Name: fmt.Sprintf("coord: job %q", j.jname),
		Log: j.log, Total: total, Disabled: j.itemDisabled, Debts: &j.debts,
	}
	err := b.Run(ctx, items, timeout, fn)
	switch {
	case errors.Is(err, recipe.ErrBarrierTimeout):
		return fmt.Errorf("%w: %w", err, ErrGuaranteeTimeout)
	case errors.Is(err, recipe.ErrSessionEnded):
		return fmt.Errorf("%w: %w", err, ErrSessionLost)
	}
	return err
}

// itemDisabled reads item's disabled flag from the store (the barrier's
// completion is decided on it: see recipe.Barrier.Disabled).
func (j *Job) itemDisabled(ctx context.Context, item int) (bool, error) {
	ok, _, err := j.st.Exists(ctx, j.p.Item(item, layout.NDisabled))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Item(item, layout.NDisabled), err)
	}
	return ok, nil
}

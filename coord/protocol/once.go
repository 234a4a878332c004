package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/recipe"
	"github.com/shardflow/shardflow/coord/store"
)

// phaseBarrier runs a job's distribute-once barriers (Job.Once, Run.Once)
// for this server. Its fields never change.
type phaseBarrier struct {
	st    store.Store
	p     layout.JobPaths
	id    string
	jname string
	log   *slog.Logger
	debts *recipe.Debts // the job's
}

// run runs the phase barrier (recipe.Barrier over guarantee/{phase})
// for items out of 0..total-1, its writes a cut connection stops owed to
// the job's debts. The barrier's sentinels read as coord's: a timeout as
// ErrGuaranteeTimeout, registrations gone with their session as
// ErrSessionLost.
func (b phaseBarrier) run(ctx context.Context, total int, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if phase != "started" && phase != "completed" {
		return fmt.Errorf("coord: Once phase %q must be \"started\" or \"completed\"", phase)
	}
	bar := recipe.Barrier{
		Store: b.st, Dir: b.p.Abs(layout.NGuarantee + "/" + phase), ID: b.id, Name: fmt.Sprintf("coord: job %q", b.jname),
		Log: b.log, Total: total, Disabled: b.itemDisabled, Debts: b.debts,
	}
	err := bar.Run(ctx, items, timeout, fn)
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
func (b phaseBarrier) itemDisabled(ctx context.Context, item int) (bool, error) {
	ok, _, err := b.st.Exists(ctx, b.p.Item(item, layout.NDisabled))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read %s: %w", b.jname, b.p.Item(item, layout.NDisabled), err)
	}
	return ok, nil
}

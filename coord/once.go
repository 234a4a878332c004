package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// onceRunner is the child of guarantee/{phase} whose creator runs the
// callback; ephemeral, so a runner that dies frees it.
const onceRunner = "runner"

func (j *job) once(ctx context.Context, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if phase != "started" && phase != "completed" {
		return fmt.Errorf("coord: Once phase %q must be \"started\" or \"completed\"", phase)
	}
	if len(items) == 0 {
		return nil
	}
	total := j.config().ShardingTotalCount
	base := j.p.abs(nGuarantee + "/" + phase)
	if err := store.CreateAll(ctx, j.st, base); err != nil {
		return fmt.Errorf("coord: job %q: create %s: %w", j.jname, base, err)
	}
	for _, it := range items {
		if _, err := j.st.Create(ctx, store.Join(base, strconv.Itoa(it)), []byte(j.id), store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: job %q: register item %d under %s: %w", j.jname, it, base, err)
		}
	}
	kids, _, err := j.st.Children(ctx, base)
	if err != nil {
		return fmt.Errorf("coord: job %q: read %s: %w", j.jname, base, err)
	}
	expected, err := j.runnableItems(ctx, total)
	if err != nil {
		return err
	}
	seen := 0
	for _, k := range kids {
		if it, ok := parseItemName(k); ok && it < total {
			seen++
		}
	}
	if seen >= expected {
		_, err := j.st.Create(ctx, store.Join(base, onceRunner), []byte(j.id), store.Ephemeral)
		if err == nil {
			ferr := fn(ctx)
			// Clear the set: registrations first, the runner last.
			kids, _, _ := j.st.Children(context.WithoutCancel(ctx), base)
			for _, k := range kids {
				if k == onceRunner {
					continue
				}
				if err := j.st.Delete(context.WithoutCancel(ctx), store.Join(base, k), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
					j.log.Warn("cannot clear guarantee node", "node", store.Join(base, k), "err", err)
				}
			}
			if err := j.st.Delete(context.WithoutCancel(ctx), store.Join(base, onceRunner), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
				j.log.Warn("cannot clear guarantee runner", "err", err)
			}
			return ferr
		}
		if !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: job %q: create %s: %w", j.jname, store.Join(base, onceRunner), err)
		}
	}
	// Wait until the runner clears our registration, or time out.
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	mine := store.Join(base, strconv.Itoa(items[0]))
	for {
		ok, _, ch, err := j.st.ExistsW(wctx, mine)
		if err == nil && !ok {
			return nil
		}
		if err == nil {
			select {
			case <-ch:
				continue
			case <-wctx.Done():
				err = wctx.Err()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			for _, it := range items {
				_ = j.st.Delete(context.WithoutCancel(ctx), store.Join(base, strconv.Itoa(it)), store.AnyVersion)
			}
			return fmt.Errorf("coord: job %q: %s barrier after %v: %w", j.jname, phase, timeout, ErrGuaranteeTimeout)
		}
		return fmt.Errorf("coord: job %q: wait on %s: %w", j.jname, mine, err)
	}
}

// runnableItems is the size of the set a Once barrier waits for: the items
// that run in a run across the servers, that is 0..total-1 minus the items
// an operator disabled (no server runs or registers those). Disabled flags
// are read as Begin reads them (the tree cache where it holds the item,
// else directly).
func (j *job) runnableItems(ctx context.Context, total int) (int, error) {
	n := 0
	for it := range total {
		disabled, err := j.itemHas(ctx, relItem(it, nDisabled))
		if err != nil {
			return 0, err
		}
		if !disabled {
			n++
		}
	}
	return n, nil
}

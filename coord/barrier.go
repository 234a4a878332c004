package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// onceRunner is the child of guarantee/{phase} whose creator runs the
// callback; ephemeral, so a runner that dies frees it.
const onceRunner = "runner"

// onceBarrier is the distribute-once barrier of one phase ("started" or
// "completed") of a run: every server registers its items under base
// (guarantee/{phase}); the server whose registration completes the set
// takes the runner latch (a tryLatch), checks its registration is still
// there (another server may have completed, run and cleared the same set
// first), runs the callback and clears the set; the others wait until their
// registration is cleared.
//
// Blocking and cancellation: run blocks until the callback has run here,
// or, on a server that did not complete the set, until the runner cleared
// this server's registration, the timeout passed (ErrGuaranteeTimeout; its
// registrations are withdrawn so the set never completes late), or ctx
// ended (ctx.Err()). The callback gets ctx; clearing the set after it is
// not cancelled by ctx, so a cancelled callback never leaves the barrier
// closed for the next run.
type onceBarrier struct {
	st    store.Store
	base  string // guarantee/{phase}, absolute
	id    string // this server
	job   string // for errors
	log   *slog.Logger
	total int // items 0..total-1 count towards the set
	// expected returns how many items complete the set (the runnable
	// ones); read after this server registered.
	expected func(context.Context) (int, error)
}

// run registers items and either runs fn (this server completed the set)
// or waits for the runner; see onceBarrier.
func (b onceBarrier) run(ctx context.Context, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if err := store.CreateAll(ctx, b.st, b.base); err != nil {
		return fmt.Errorf("coord: job %q: create %s: %w", b.job, b.base, err)
	}
	for _, it := range items {
		if _, err := b.st.Create(ctx, store.Join(b.base, strconv.Itoa(it)), []byte(b.id), store.Persistent); err != nil && !errors.Is(err, store.ErrNodeExists) {
			return fmt.Errorf("coord: job %q: register item %d under %s: %w", b.job, it, b.base, err)
		}
	}
	kids, _, err := b.st.Children(ctx, b.base)
	if err != nil {
		return fmt.Errorf("coord: job %q: read %s: %w", b.job, b.base, err)
	}
	expected, err := b.expected(ctx)
	if err != nil {
		return err
	}
	seen := 0
	for _, k := range kids {
		if it, ok := parseItemName(k); ok && it < b.total {
			seen++
		}
	}
	if seen >= expected {
		runner := tryLatch{st: b.st, path: store.Join(b.base, onceRunner), owner: []byte(b.id)}
		held, err := runner.tryAcquire(ctx)
		if err != nil {
			return fmt.Errorf("coord: job %q: create %s: %w", b.job, runner.path, err)
		}
		if held {
			// The set read above may have been run and cleared meanwhile by
			// another server that completed it too (and released the
			// latch): then this server's registration is gone, and running
			// fn again would be a second callback for one barrier. While
			// the latch is held nobody clears, so the check is final.
			mine := store.Join(b.base, strconv.Itoa(items[0]))
			ok, _, err := b.st.Exists(ctx, mine)
			if err != nil || !ok {
				if rerr := runner.release(context.WithoutCancel(ctx)); rerr != nil {
					b.log.Warn("cannot clear guarantee runner", "err", rerr)
				}
				if err != nil {
					return fmt.Errorf("coord: job %q: read %s: %w", b.job, mine, err)
				}
				return nil // run and cleared by the other server
			}
			ferr := fn(ctx)
			b.clear(ctx, runner)
			return ferr
		}
	}
	return b.wait(ctx, items, timeout)
}

// clear removes the set after the callback: registrations first, the
// runner latch last, none of it cancelled by ctx.
func (b onceBarrier) clear(ctx context.Context, runner tryLatch) {
	ctx = context.WithoutCancel(ctx)
	kids, _, _ := b.st.Children(ctx, b.base)
	for _, k := range kids {
		if k == onceRunner {
			continue
		}
		if err := b.st.Delete(ctx, store.Join(b.base, k), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			b.log.Warn("cannot clear guarantee node", "node", store.Join(b.base, k), "err", err)
		}
	}
	if err := runner.release(ctx); err != nil {
		b.log.Warn("cannot clear guarantee runner", "err", err)
	}
}

// wait blocks until the runner clears this server's registration, the
// timeout passes or ctx ends; see onceBarrier.
func (b onceBarrier) wait(ctx context.Context, items []int, timeout time.Duration) error {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	mine := store.Join(b.base, strconv.Itoa(items[0]))
	for {
		ok, _, ch, err := b.st.ExistsW(wctx, mine)
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
				_ = b.st.Delete(context.WithoutCancel(ctx), store.Join(b.base, strconv.Itoa(it)), store.AnyVersion)
			}
			return fmt.Errorf("coord: job %q: %s barrier after %v: %w", b.job, store.Base(b.base), timeout, ErrGuaranteeTimeout)
		}
		return fmt.Errorf("coord: job %q: wait on %s: %w", b.job, mine, err)
	}
}

// once is Job.Once: this run's phase barrier over the job's current total.
func (j *job) once(ctx context.Context, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	return j.onceOver(ctx, j.config().ShardingTotalCount, phase, items, timeout, fn)
}

// once is Run.Once: the phase barrier over the run's items and its config
// snapshot's total.
func (r *run) once(ctx context.Context, phase string, timeout time.Duration, fn func(context.Context) error) error {
	items := make([]int, len(r.items))
	for i, a := range r.items {
		items[i] = a.Item
	}
	return r.j.onceOver(ctx, r.cfg.ShardingTotalCount, phase, items, timeout, fn)
}

// onceOver runs the phase barrier for items out of 0..total-1.
func (j *job) onceOver(ctx context.Context, total int, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if phase != "started" && phase != "completed" {
		return fmt.Errorf("coord: Once phase %q must be \"started\" or \"completed\"", phase)
	}
	if len(items) == 0 {
		return nil
	}
	b := onceBarrier{
		st: j.st, base: j.p.abs(nGuarantee + "/" + phase), id: j.id, job: j.jname, log: j.log, total: total,
		expected: func(ctx context.Context) (int, error) { return j.runnableItems(ctx, total) },
	}
	return b.run(ctx, items, timeout, fn)
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

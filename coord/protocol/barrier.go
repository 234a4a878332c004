package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// onceRunner is the child of guarantee/{phase} whose creator runs the
// callback; ephemeral, so a runner that dies frees it.
const onceRunner = "runner"

// withdrawWait bounds the withdrawal of a participant's registrations
// when its wait ends without a release; what it cannot delete in time
// (the connection cut) is owed (sessionDebt).
const withdrawWait = 2 * time.Second

// onceBarrier is the distribute-once barrier of one phase ("started" or
// "completed") of a run: every server registers its items under base
// (guarantee/{phase}); the server whose registration completes the set
// (every runnable item registered) takes the runner latch (a tryLatch),
// checks that the set was not run meanwhile, runs the callback and clears
// the set; the others wait until it is cleared.
//
// A run of the set is told by the phase node's data version, the set's
// generation: the runner bumps it before it deletes the registrations. A
// participant whose registration is gone is released only if the
// generation moved since it registered; else the registration went with
// another participant of the same item (its session, or its withdrawal),
// and it registers again. Registrations are ephemeral, so a participant
// that dies leaves none behind to complete a later set before every
// server of that run registered; one that stops waiting (timeout, ctx)
// withdraws them. Registrations of items that do not count (disabled, or
// beyond the total) never complete a set.
//
// A cut connection does not end a session: it may resume, with every
// ephemeral node it held. A participant that gives up while cut off, or
// whose store call fails after it registered, cannot delete its
// registrations then; a runner cut off in its callback cannot clear the
// set, nor free the runner latch. Left on a resumed session, a
// registration would complete a later set before that run's participant of
// the item registered (simulation: a callback ran before the last server's
// Once, which timed out), and the latch would keep every later set of the
// phase from running. So what the barrier cannot write is owed to the
// session (sessionDebt, owed.go): the job writes it as soon as that session is
// connected again, before it registers anything else, and drops it once the
// session is gone (its ephemeral nodes went with it).
//
// Blocking and cancellation: run blocks until the callback has run here,
// or, on a server that did not complete the set, until a runner cleared
// it, the timeout passed (ErrGuaranteeTimeout), ctx ended (ctx.Err()), or
// the session its registrations were made on was lost (ErrSessionLost).
// The callback gets ctx; clearing the set after it is not cancelled by
// ctx, so a cancelled callback never leaves the barrier closed for the
// next run.
type onceBarrier struct {
	st    store.Store
	base  string // guarantee/{phase}, absolute
	id    string // this server
	job   string // for errors
	log   *slog.Logger
	total int // items 0..total-1 count towards the set
	// disabled reports whether an operator disabled item (no server runs
	// or registers it, so the set is complete without it), read from the
	// store, never from a cache: the set's completion is decided on it.
	disabled func(ctx context.Context, item int) (bool, error)
	// owe hands the job a write the barrier could not make on session
	// (the connection cut): see onceBarrier and job.owe.
	owe func(session int64, what string, pay func(context.Context) error)
}

// errRegisterAgain: a registration went without a release.
var errRegisterAgain = errors.New("coord: barrier registration gone without a release")

// run registers items and either runs fn (this server completed the set)
// or waits for the runner; see onceBarrier.
func (b onceBarrier) run(ctx context.Context, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if err := store.CreateAll(ctx, b.st, b.base); err != nil {
		return fmt.Errorf("coord: job %q: create %s: %w", b.job, b.base, err)
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for {
		err := b.attempt(ctx, wctx, items, timeout, fn)
		if !errors.Is(err, errRegisterAgain) {
			return err
		}
	}
}

// attempt is one registration of run: the generation read first, then
// the registrations, the completion check, the callback or the wait.
func (b onceBarrier) attempt(ctx, wctx context.Context, items []int, timeout time.Duration, fn func(context.Context) error) error {
	_, st, err := b.st.Get(ctx, b.base)
	if err != nil {
		return fmt.Errorf("coord: job %q: read %s: %w", b.job, b.base, err)
	}
	gen := st.Version
	// The session the registrations are made on: they go with it.
	sess, _ := b.st.Session()
	for i, it := range items {
		p := store.Join(b.base, strconv.Itoa(it))
		_, err := b.st.Create(ctx, p, []byte(b.id), store.Ephemeral)
		if errors.Is(err, store.ErrNodeExists) {
			// Ours (an earlier attempt of this call), or another run's
			// of the same item: two runs of one item at once (with
			// monitorExecution off a reshard may move an item still
			// running). That registration stands for its own run: one
			// riding on it would be released by a set it had no part in,
			// even by a callback that ran before this call.
			data, st, gerr := b.st.Get(ctx, p)
			switch {
			case errors.Is(gerr, store.ErrNoNode):
				b.withdraw(ctx, sess, items[:i])
				return errRegisterAgain // gone meanwhile
			case gerr != nil:
				err = gerr
			case !b.made(data, st, sess):
				b.withdraw(ctx, sess, items[:i])
				b.debug(ctx, "item registered by another run; waiting for it to go", "items", items, "item", it, "by", string(data), "owner", st.EphemeralOwner)
				return b.awaitGone(ctx, wctx, p, items, timeout)
			default:
				err = nil
			}
		}
		if err != nil {
			// The failed create may have been applied (a lost reply).
			b.withdraw(ctx, sess, items[:i+1])
			return fmt.Errorf("coord: job %q: register item %d under %s: %w", b.job, it, b.base, err)
		}
	}
	kids, _, err := b.st.Children(ctx, b.base)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("coord: job %q: read %s: %w", b.job, b.base, err)
	}
	missing, err := b.missing(ctx, kids)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return err
	}
	b.debug(ctx, "registered", "items", items, "gen", gen, "session", sess.ID, "missing", missing)
	heldElsewhere := false
	if missing < 0 {
		runner := tryLatch{st: b.st, path: store.Join(b.base, onceRunner), owner: []byte(b.id)}
		held, err := runner.tryAcquire(ctx)
		if err != nil {
			b.withdraw(ctx, sess, items)
			return fmt.Errorf("coord: job %q: create %s: %w", b.job, runner.path, err)
		}
		if !held {
			b.debug(ctx, "set complete, runner latch held elsewhere", "items", items, "gen", gen)
			heldElsewhere = true
		}
		if held {
			// The set read above may have been run and cleared meanwhile
			// by another server that completed it too (and released the
			// latch): then the generation moved, and running fn again
			// would be a second callback for one set. While the latch is
			// held nobody clears, so the check is final.
			_, now, err := b.st.Get(ctx, b.base)
			if err != nil || now.Version != gen {
				b.release(ctx, sess, runner)
				if err != nil {
					b.withdraw(ctx, sess, items)
					return fmt.Errorf("coord: job %q: read %s: %w", b.job, b.base, err)
				}
				// Run and cleared by the other server, this registration
				// with it; one still there was made after that set was
				// read, and belongs to the next set (a node of another
				// session there is another run's: see wait).
				ok, mst, err := b.st.Exists(ctx, store.Join(b.base, strconv.Itoa(items[0])))
				if err != nil {
					b.withdraw(ctx, sess, items)
					return fmt.Errorf("coord: job %q: read %s: %w", b.job, b.base, err)
				}
				if ok && mst.EphemeralOwner == sess.ID {
					b.debug(ctx, "set run meanwhile by another server, without this registration; registering again", "items", items, "gen", gen, "now", now.Version)
					return errRegisterAgain
				}
				b.debug(ctx, "set run meanwhile by another server", "items", items, "gen", gen, "now", now.Version)
				return nil
			}
			b.debug(ctx, "running the callback", "items", items, "gen", gen)
			ferr := fn(ctx)
			b.clear(ctx, sess, runner)
			return ferr
		}
	}
	return b.wait(ctx, wctx, sess, gen, items, timeout, heldElsewhere)
}

// missing returns an item the set still waits for (in 0..total-1, not
// registered in kids, not disabled), or -1 when the set is complete. The
// disabled flags are read from the store, one per unregistered item until
// one is found enabled: a participant whose set is incomplete usually
// stops at the first, and the one completing it reads only the disabled
// items. A cached flag would lag: an item disabled since, read as enabled,
// kept the set from ever completing (a barrier timeout with every runnable
// item registered: simulation seed 3154899, where the cache had not yet
// taken in an item disabled while the server was cut off); one enabled
// since, read as disabled, completed the set before that item's run
// registered.
func (b onceBarrier) missing(ctx context.Context, kids []string) (int, error) {
	registered := make(map[int]bool, len(kids))
	for _, k := range kids {
		if it, ok := layout.ParseItemName(k); ok && it < b.total {
			registered[it] = true
		}
	}
	for it := range b.total {
		if registered[it] {
			continue
		}
		disabled, err := b.disabled(ctx, it)
		if err != nil {
			return 0, err
		}
		if !disabled {
			return it, nil
		}
	}
	return -1, nil
}

// sessionGone tells a registration the runner cleared from one that went
// with its session (registrations are ephemeral): ErrSessionLost when
// the session they were made on is no longer the store's, else nil.
func (b onceBarrier) sessionGone(sess store.Session) error {
	if cur, _ := b.st.Session(); cur.ID != sess.ID {
		return fmt.Errorf("coord: job %q: %s barrier: its registration went with the session: %w", b.job, store.Base(b.base), ErrSessionLost)
	}
	return nil
}

// clear ends the set after the callback: the generation bumped first (a
// waiter whose registration goes must see it moved), then the set's
// registrations, the runner latch last, none of it cancelled by ctx. The
// set is its items, 0..total-1: a registration of an item beyond the total
// is another run's, begun on another total (runs begun during a reshard
// see different totals), and stays for its own set. (Deleted with this
// one, it read as released to its participant, whose Once returned without
// a callback for its set: ZooKeeper simulation seed 1000297, memstore seed
// 9805454.) What a cut connection stops is owed to sess, the session the
// latch was taken on (onceBarrier), from where it stopped.
func (b onceBarrier) clear(ctx context.Context, sess store.Session, runner tryLatch) {
	c := &setClear{b: b, runner: runner, session: sess.ID}
	if err := c.run(context.WithoutCancel(ctx)); err != nil {
		b.log.Warn("cannot clear the guarantee set, connection lost; clearing it when the session resumes", "node", b.base, "err", err)
		b.owe(sess.ID, "clear "+b.base, c.run)
	}
}

// setClear is the progress of one clear: a clear owed goes on where the
// connection stopped it, so that it deletes the registrations the set had
// when its generation moved, not ones made since the session resumed.
type setClear struct {
	b       onceBarrier
	runner  tryLatch
	session int64 // the session the set ran on (the latch's)
	bumped  bool
	kids    []string // nil: not read yet
}

// run makes the clear's remaining writes. A lost connection stops it (the
// error: the rest is owed); any other failure is logged and the clear goes
// on, as nothing will retry it.
//
// Only on the session the set ran on: when that session ended during the
// callback (the store has opened another), its registrations and the latch
// went with it, and what is under the phase node now belongs to later sets,
// registered at the same generation since nothing bumped it. Bumping it and
// deleting them released those participants without a callback (ZooKeeper
// simulation seed 1107147, after the expiry of the runner's session during
// its callback). The set's other participants then time out, as when a
// runner dies. The bump also checks the latch, an ephemeral of that
// session: a session the service ended before the store noticed fails it.
func (c *setClear) run(ctx context.Context) error {
	b := c.b
	failed := func(what string, err error) error {
		if err == nil || errors.Is(err, store.ErrNoNode) {
			return nil
		}
		if b.lost(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		b.log.Warn("cannot clear guarantee node", "what", what, "err", err)
		return nil
	}
	sessionEnded := func() bool {
		cur, _ := b.st.Session()
		if cur.ID == c.session {
			return false
		}
		b.debug(ctx, "the set's session ended during the callback: nothing of it to clear", "session", c.session)
		return true
	}
	if !c.bumped {
		if sessionEnded() {
			return nil
		}
		_, err := b.st.Multi(ctx,
			&store.CheckOp{Path: c.runner.path, Version: store.AnyVersion},
			&store.SetOp{Path: b.base, Version: store.AnyVersion})
		if errors.Is(err, store.ErrNoNode) {
			b.debug(ctx, "the set's runner latch is gone with its session: nothing of it to clear", "session", c.session)
			return nil
		}
		if err := failed("mark the set run", err); err != nil {
			return err
		}
		c.bumped = true
	}
	if c.kids == nil {
		if sessionEnded() {
			return nil
		}
		kids, _, err := b.st.Children(ctx, b.base)
		if err := failed("read the set", err); err != nil {
			return err
		}
		set := slices.DeleteFunc(kids, func(k string) bool {
			it, ok := layout.ParseItemName(k)
			return !ok || it >= b.total // the runner latch, or another total's item
		})
		c.kids = append(set, onceRunner)
	}
	for len(c.kids) > 0 {
		k := c.kids[0]
		var err error
		if k == onceRunner {
			err = c.runner.release(ctx)
		} else {
			err = b.st.Delete(ctx, store.Join(b.base, k), store.AnyVersion)
		}
		if err := failed("delete "+store.Join(b.base, k), err); err != nil {
			return err
		}
		c.kids = c.kids[1:]
	}
	return nil
}

// release frees the runner latch this participant took on sess; owed when
// the connection is cut.
func (b onceBarrier) release(ctx context.Context, sess store.Session, runner tryLatch) {
	if err := runner.release(ctx); err != nil {
		b.log.Warn("cannot clear guarantee runner", "err", err)
		if b.lost(err) {
			b.owe(sess.ID, "free "+runner.path, runner.release)
		}
	}
}

// withdraw deletes this participant's registrations of items made on sess
// (a node of the item another session registered is that participant's,
// and stays), within withdrawWait; the ones the connection keeps it from
// deleting are owed to sess (onceBarrier).
func (b onceBarrier) withdraw(ctx context.Context, sess store.Session, items []int) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawWait)
	defer cancel()
	for i, it := range items {
		if err := b.withdrawItem(dctx, sess.ID, it); err != nil {
			if b.lost(err) {
				left := slices.Clone(items[i:])
				b.owe(sess.ID, fmt.Sprintf("withdraw %v from %s", left, b.base), func(ctx context.Context) error {
					for _, it := range left {
						if err := b.withdrawItem(ctx, sess.ID, it); err != nil {
							return err
						}
					}
					return nil
				})
			} else {
				b.log.Warn("cannot withdraw a guarantee registration", "node", store.Join(b.base, strconv.Itoa(it)), "err", err)
			}
			return
		}
	}
}

// made reports whether a registration (its data and stat) is this
// server's on sess, or on the store's current session (the registration
// call may have gone on a session that replaced sess).
func (b onceBarrier) made(data []byte, st store.Stat, sess store.Session) bool {
	cur, _ := b.st.Session()
	return string(data) == b.id && (st.EphemeralOwner == sess.ID || st.EphemeralOwner == cur.ID)
}

// awaitGone waits, registered nowhere, until the registration at p,
// another run's, goes (its set run, or withdrawn), then has the caller
// register again; the timeout and ctx end it as they end wait.
func (b onceBarrier) awaitGone(ctx, wctx context.Context, p string, items []int, timeout time.Duration) error {
	for {
		ok, _, ch, err := b.st.ExistsW(wctx, p)
		if err == nil && !ok {
			return errRegisterAgain
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
			b.debug(ctx, "timed out", "items", items, "waiting for", p)
			return fmt.Errorf("coord: job %q: %s barrier after %v (items %v; %s registered by another run; %s): %w", b.job, store.Base(b.base), timeout, items, store.Base(p), b.state(ctx), ErrGuaranteeTimeout)
		}
		return fmt.Errorf("coord: job %q: wait on %s: %w", b.job, p, err)
	}
}

// withdrawItem deletes item's registration if this server made it on
// session (made).
func (b onceBarrier) withdrawItem(ctx context.Context, session int64, item int) error {
	p := store.Join(b.base, strconv.Itoa(item))
	data, st, err := b.st.Get(ctx, p)
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if !b.made(data, st, store.Session{ID: session}) {
		return nil
	}
	if err := b.st.Delete(ctx, p, st.Version); err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
		return err
	}
	return nil
}

// lost reports whether err is a connection or session failure (the write
// may be owed), not a refusal.
func (b onceBarrier) lost(err error) bool {
	return lostConnection(b.st, err) || errors.Is(err, context.DeadlineExceeded)
}

// wait blocks until a runner clears this server's registration (the
// generation moved past gen), the timeout passes or ctx ends; see
// onceBarrier. errRegisterAgain: the registration went without a release.
//
// heldElsewhere: this participant found the set complete and the runner
// latch taken. The holder may be finishing the clear of an earlier set,
// whose registrations it read before this one was made: it then frees the
// latch without clearing this set, and nobody would run it. So the latch is
// watched too, and its release with this registration still there has the
// participant register again (find the set complete, take the latch).
func (b onceBarrier) wait(ctx, wctx context.Context, sess store.Session, gen int32, items []int, timeout time.Duration, heldElsewhere bool) error {
	mine := store.Join(b.base, strconv.Itoa(items[0]))
	runner := store.Join(b.base, onceRunner)
	for {
		ok, st, ch, err := b.st.ExistsW(wctx, mine)
		// A node of another session there is another run's registration
		// of the item, made after this one went (the path is the item's).
		if err == nil && (!ok || st.EphemeralOwner != sess.ID) {
			if err := b.sessionGone(sess); err != nil {
				return err
			}
			_, st, gerr := b.st.Get(wctx, b.base)
			if gerr == nil && st.Version != gen {
				b.debug(ctx, "released", "items", items, "gen", gen, "now", st.Version)
				return nil // released
			}
			if gerr == nil {
				b.debug(ctx, "registration gone without a release; registering again", "items", items, "gen", gen)
				return errRegisterAgain
			}
			err = gerr
		}
		var latch <-chan store.Event // nil: not watched
		if err == nil && heldElsewhere {
			held, _, lch, lerr := b.st.ExistsW(wctx, runner)
			if lerr == nil && !held {
				// The holder frees the latch after its clear's deletes:
				// this registration is looked at again now (seen before,
				// it may have gone since: simulation seed 9100902).
				ok, st, err := b.st.Exists(wctx, mine)
				if err == nil && ok && st.EphemeralOwner == sess.ID {
					b.debug(ctx, "runner latch freed with this registration still there; registering again", "items", items, "gen", gen)
					return errRegisterAgain
				}
				if err == nil {
					continue // gone: released, or to register again
				}
				lerr = err
			}
			err, latch = lerr, lch
		}
		if err == nil {
			select {
			case <-ch:
				continue
			case <-latch:
				continue
			case <-wctx.Done():
				err = wctx.Err()
			}
		}
		var state string // the set as the timeout found it
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			state = b.state(ctx)
		}
		// Withdrawn, so that the set never completes late (nor early for
		// a later run, with this registration in it); on a connection
		// cut, owed to the session, which may resume.
		b.withdraw(ctx, sess, items)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			b.debug(ctx, "timed out", "items", items, "gen", gen, "session", sess.ID, "state", state)
			return fmt.Errorf("coord: job %q: %s barrier after %v (items %v, registered at generation %d; %s): %w", b.job, store.Base(b.base), timeout, items, gen, state, ErrGuaranteeTimeout)
		}
		return fmt.Errorf("coord: job %q: wait on %s: %w", b.job, mine, err)
	}
}

// debug logs a decision of the barrier with the set's registrations (each
// item's server and session), read only when debug logging is on: the
// diagnostics of a set that never completes or releases without a callback
// (the simulation prints them with a barrier violation).
func (b onceBarrier) debug(ctx context.Context, msg string, args ...any) {
	if !b.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	args = append(args, "server", b.id, "phase", store.Base(b.base), "set", b.state(ctx))
	b.log.Debug("distribute-once: "+msg, args...)
}

// state describes the set as stored now: its generation, each
// registration's item, server and session, and the runner latch's holder.
// Off the normal path (debug logging, a timeout): a read per child.
func (b onceBarrier) state(ctx context.Context) string {
	ctx = context.WithoutCancel(ctx)
	_, st, err := b.st.Get(ctx, b.base)
	if err != nil {
		return fmt.Sprintf("unreadable: %v", err)
	}
	kids, _, err := b.st.Children(ctx, b.base)
	if err != nil {
		return fmt.Sprintf("generation %d, registrations unreadable: %v", st.Version, err)
	}
	slices.Sort(kids)
	var regs []string
	for _, k := range kids {
		data, kst, err := b.st.Get(ctx, store.Join(b.base, k))
		if err != nil {
			continue // gone meanwhile
		}
		regs = append(regs, fmt.Sprintf("%s=%s@0x%x", k, data, kst.EphemeralOwner))
	}
	return fmt.Sprintf("generation %d, registrations [%s]", st.Version, strings.Join(regs, " "))
}

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

// onceOver runs the phase barrier for items out of 0..total-1.
func (j *Job) onceOver(ctx context.Context, total int, phase string, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if phase != "started" && phase != "completed" {
		return fmt.Errorf("coord: Once phase %q must be \"started\" or \"completed\"", phase)
	}
	if len(items) == 0 {
		return nil
	}
	// What an earlier Once owes this session goes first: a registration
	// left from it must not count in the set this one joins, nor a
	// withdrawal made after this one registered delete its registration.
	// Not made (the connection cut again): nothing is registered.
	sess, _ := j.st.Session()
	if err := j.payDebts(ctx, sess); err != nil {
		return err
	}
	b := onceBarrier{
		st: j.st, base: j.p.Abs(layout.NGuarantee + "/" + phase), id: j.id, job: j.jname, log: j.log, total: total,
		disabled: j.itemDisabled, owe: j.owe,
	}
	return b.run(ctx, items, timeout, fn)
}

// itemDisabled reads item's disabled flag from the store (the barrier's
// completion is decided on it: see onceBarrier.missing).
func (j *Job) itemDisabled(ctx context.Context, item int) (bool, error) {
	ok, _, err := j.st.Exists(ctx, j.p.Item(item, layout.NDisabled))
	if err != nil {
		return false, fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Item(item, layout.NDisabled), err)
	}
	return ok, nil
}

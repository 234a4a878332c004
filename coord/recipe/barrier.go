package recipe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// onceRunner is the child of the barrier's directory whose creator runs
// the callback (taken with the set's mark: Barrier); ephemeral, so a
// runner that dies frees it.
const onceRunner = "runner"

// withdrawWait bounds the withdrawal of a participant's registrations
// when its wait ends without a release; what it cannot delete in time
// (the connection cut) is owed (Debts).
const withdrawWait = 2 * time.Second

// Sentinel errors of the barrier (its errors wrap them).
var (
	// ErrBarrierTimeout: Run's timeout passed before the set completed and
	// ran; this participant's registrations are withdrawn.
	ErrBarrierTimeout = errors.New("barrier: timed out waiting for the other participants")
	// ErrSessionEnded: the session this participant's registrations were
	// made on ended while it waited; they went with it.
	ErrSessionEnded = errors.New("barrier: registrations went with their session")
)

// Barrier is a distribute-once barrier over a set of items 0..Total-1
// (coord's guarantee/{phase} of a run): every participant registers its
// items under Dir; the participant whose registration completes the set
// (every item that counts registered) takes it, runs the callback and
// clears the set; the others wait until it is cleared. The callback runs
// once per set, on one participant.
//
// Taking the set is one transaction: the runner latch (Dir/runner,
// ephemeral) created and Dir's data set to the runner's mark, at the data
// version (the set's generation) read before registering, so that of two
// participants that completed the same set one takes it. The mark's zxid
// (Dir's Mzxid) tells the set's registrations (created before it) from
// later ones: the clear deletes only those, then removes the mark with the
// latch in one transaction. The mark is persistent: when the runner's
// session ends before its clear finished, the registrations of its set,
// served by its callback, are still told from later ones, and are cleared
// by the runner on its next session or by the participant that next finds
// the set complete with the latch free; they never count in a later set.
//
// A participant whose registration is gone is released only if the
// generation moved since it registered (its set was taken); else the
// registration went with another participant of the same item (its
// session, or its withdrawal), and it registers again.
// Registrations are ephemeral, so a participant that dies leaves none
// behind to complete a later set before every participant of that run
// registered; one that stops waiting (timeout, ctx) withdraws them.
// Registrations of items that do not count (Disabled, or beyond Total)
// never complete a set.
//
// Session states: a cut connection does not end a session: it may resume,
// with every ephemeral node it held. A participant that gives up while cut
// off, or whose store call fails after it registered, cannot delete its
// registrations then; a runner cut off in its callback cannot clear the
// set, nor free the runner latch. Left on a resumed session, a
// registration would complete a later set before that run's participant of
// the item registered (simulation: a callback ran before the last server's
// Once, which timed out), and the latch would keep every later set from
// running. So what the barrier cannot write is owed to the session
// (Debts): Run pays what its session owes before it registers anything,
// the owner pays it as soon as the session is connected again, and it is
// dropped once the session is gone (its ephemeral nodes went with it).
//
// A Barrier is a value configured by its fields; Run may be called from any
// goroutine, one call per participant at a time.
type Barrier struct {
	// Store is the participant's store.
	Store store.Store
	// Dir is the barrier's directory (absolute), created when missing.
	Dir string
	// ID is the participant's id, the data of its registrations.
	ID string
	// Name prefixes the barrier's errors (coord: the job's name).
	Name string
	// Log receives the barrier's warnings and, at debug level, its
	// decisions with the set's state.
	Log *slog.Logger
	// Total is the size of the set: items 0..Total-1 count towards it.
	Total int
	// Disabled reports whether an item is left out of the set (no
	// participant runs or registers it, so the set is complete without
	// it). The set's completion is decided on it, so it must read the
	// store, never a cache.
	Disabled func(ctx context.Context, item int) (bool, error)
	// Debts keeps the writes the barrier could not make on its session
	// (the connection cut); it must not be nil.
	Debts *Debts
}

// errRegisterAgain: a registration went without a release.
var errRegisterAgain = errors.New("barrier: registration gone without a release")

// Run registers items and either runs fn (this participant completed the
// set) or waits for the runner. What the store's session owes (Debts) is
// paid first: a registration left from an earlier Run must not count in
// the set this one joins, nor a withdrawal made after this one registered
// delete its registration; when it cannot be paid (the connection cut
// again), nothing is registered and Run returns the error.
//
// Blocking and cancellation: Run blocks until the callback has run here,
// or, on a participant that did not complete the set, until a runner
// cleared it (nil), the timeout passed (ErrBarrierTimeout; 0: none), ctx
// ended (ctx.Err()), or the session its registrations were made on ended
// (ErrSessionEnded). The callback gets ctx, and its error is Run's as it
// is; clearing the set after it is not cancelled by ctx, so a cancelled
// callback never leaves the barrier closed for the next run.
func (b Barrier) Run(ctx context.Context, items []int, timeout time.Duration, fn func(context.Context) error) error {
	if len(items) == 0 {
		return nil
	}
	sess, _ := b.Store.Session()
	if err := b.Debts.Pay(ctx, sess); err != nil {
		return fmt.Errorf("%s: %w", b.Name, err)
	}
	if err := store.CreateAll(ctx, b.Store, b.Dir); err != nil {
		return fmt.Errorf("%s: create %s: %w", b.Name, b.Dir, err)
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

// attempt is one registration of Run: the generation read first, then
// the registrations, the completion check, the callback or the wait.
func (b Barrier) attempt(ctx, wctx context.Context, items []int, timeout time.Duration, fn func(context.Context) error) error {
	data, st, err := b.Store.Get(ctx, b.Dir)
	if err != nil {
		return fmt.Errorf("%s: read %s: %w", b.Name, b.Dir, err)
	}
	gen := st.Version
	// The session the registrations are made on: they go with it.
	sess, _ := b.Store.Session()
	if registered, err := b.register(ctx, wctx, sess, items, timeout); !registered {
		return err
	}
	kids, _, err := b.Store.Children(ctx, b.Dir)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("%s: read %s: %w", b.Name, b.Dir, err)
	}
	missing, err := b.missing(ctx, kids)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return err
	}
	b.debug(ctx, "registered", "items", items, "gen", gen, "session", sess.ID, "missing", missing, "taken", string(data))
	if missing >= 0 {
		return b.wait(ctx, wctx, sess, gen, items, timeout, false)
	}
	if len(data) > 0 {
		return b.finishTaken(ctx, wctx, sess, st, items, timeout)
	}
	return b.take(ctx, wctx, sess, gen, items, timeout, fn)
}

// take takes the complete set registered at generation gen: the runner
// latch and the mark in one transaction (Barrier), then runs fn and clears
// the set. The latch held elsewhere: a runner in its callback or clear,
// waited for. The generation moved: the set was taken meanwhile by another
// participant that completed it too, and running fn would be a second
// callback for one set.
func (b Barrier) take(ctx, wctx context.Context, sess store.Session, gen int32, items []int, timeout time.Duration, fn func(context.Context) error) error {
	runner := store.Join(b.Dir, onceRunner)
	tag := []byte(fmt.Sprintf("%s@0x%x", b.ID, sess.ID))
	res, err := b.Store.Multi(ctx,
		&store.CreateOp{Path: runner, Data: []byte(b.ID), Mode: store.Ephemeral},
		&store.SetOp{Path: b.Dir, Data: tag, Version: gen})
	var mark store.Stat
	switch {
	case err == nil:
		mark = res[1].Stat
	case errors.Is(err, store.ErrNodeExists):
		b.debug(ctx, "set complete, runner latch held elsewhere", "items", items, "gen", gen)
		return b.wait(ctx, wctx, sess, gen, items, timeout, true)
	case errors.Is(err, store.ErrBadVersion):
		return b.takenMeanwhile(ctx, sess, gen, items)
	case b.lost(err):
		// The reply lost: the transaction may have been applied. Learn
		// which from the store when the connection is back.
		applied, st, rerr := b.markApplied(wctx, gen, tag)
		if rerr != nil {
			b.withdraw(ctx, sess, items)
			b.Debts.Owe(sess.ID, "untake "+b.Dir, func(ctx context.Context) error { return b.untake(ctx, gen, tag) }, nil)
			return fmt.Errorf("%s: take the set under %s: %w (then: %w)", b.Name, b.Dir, err, rerr)
		}
		if !applied {
			return errRegisterAgain
		}
		mark = st
	default:
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("%s: take the set under %s: %w", b.Name, b.Dir, err)
	}
	b.debug(ctx, "running the callback", "items", items, "gen", gen, "mark", mark.Mzxid)
	ferr := fn(ctx)
	b.clear(ctx, &setClear{b: b, session: sess.ID, mark: mark.Mzxid, version: mark.Version, latch: true})
	return ferr
}

// takenMeanwhile: this participant found the set complete at generation
// gen, which moved before it could take it. Its registration gone: the
// set was taken with it (a clear deletes only its set's registrations) and
// a callback started after it registered; still there: it was made after
// that set was taken, and belongs to the next set.
func (b Barrier) takenMeanwhile(ctx context.Context, sess store.Session, gen int32, items []int) error {
	last := store.Join(b.Dir, strconv.Itoa(items[len(items)-1]))
	ok, mst, err := b.Store.Exists(ctx, last)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("%s: read %s: %w", b.Name, last, err)
	}
	if ok && mst.EphemeralOwner == sess.ID {
		b.debug(ctx, "set taken meanwhile by another server, without this registration; registering again", "items", items, "gen", gen)
		return errRegisterAgain
	}
	if err := b.sessionGone(sess); err != nil {
		return err
	}
	b.debug(ctx, "set taken meanwhile by another server", "items", items, "gen", gen)
	b.withdrawLeft(ctx, sess, items)
	return nil
}

// finishTaken: the set is complete, but the directory still carries the
// mark of a set taken before (st: its stat) whose clear did not finish.
// With the runner latch free, that runner's session ended (the latch is
// freed with the mark in one transaction): its set's registrations, made
// before the mark, are cleared here (they must not count in this set: each
// was served by that set's callback), and this participant registers
// again. With the latch held, its runner is in its callback or clear:
// waited for.
func (b Barrier) finishTaken(ctx, wctx context.Context, sess store.Session, st store.Stat, items []int, timeout time.Duration) error {
	held, _, err := b.Store.Exists(ctx, store.Join(b.Dir, onceRunner))
	if err != nil {
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("%s: read %s: %w", b.Name, store.Join(b.Dir, onceRunner), err)
	}
	if held {
		b.debug(ctx, "set complete, taken set's runner latch held", "items", items, "gen", st.Version)
		return b.wait(ctx, wctx, sess, st.Version, items, timeout, true)
	}
	b.debug(ctx, "clearing a set whose runner's session ended", "items", items, "gen", st.Version, "mark", st.Mzxid)
	c := &setClear{b: b, session: sess.ID, mark: st.Mzxid, version: st.Version}
	if err := c.run(context.WithoutCancel(ctx)); err != nil {
		b.withdraw(ctx, sess, items)
		return fmt.Errorf("%s: clear the set taken under %s: %w", b.Name, b.Dir, err)
	}
	return errRegisterAgain
}

// markApplied waits, within ctx, for the connection, then reports whether
// the set was taken with tag at generation gen (the stat of the mark).
func (b Barrier) markApplied(ctx context.Context, gen int32, tag []byte) (bool, store.Stat, error) {
	for {
		cur, changed := b.Store.Session()
		if cur.State == store.StateConnected {
			data, st, err := b.Store.Get(ctx, b.Dir)
			if err == nil {
				return st.Version == gen+1 && string(data) == string(tag), st, nil
			}
			if !b.lost(err) || ctx.Err() != nil {
				return false, store.Stat{}, err
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, store.Stat{}, ctx.Err()
		}
	}
}

// untake undoes a take whose outcome was unknown and whose callback did not
// run: the mark removed and the latch freed (its registrations left to
// complete the set again), if it was applied.
func (b Barrier) untake(ctx context.Context, gen int32, tag []byte) error {
	data, st, err := b.Store.Get(ctx, b.Dir)
	if err != nil || st.Version != gen+1 || string(data) != string(tag) {
		return err
	}
	_, err = b.Store.Multi(ctx,
		&store.SetOp{Path: b.Dir, Version: st.Version},
		&store.DeleteOp{Path: store.Join(b.Dir, onceRunner), Version: store.AnyVersion})
	if errors.Is(err, store.ErrNoNode) || errors.Is(err, store.ErrBadVersion) {
		return nil
	}
	return err
}

// register makes this participant's registrations of items on sess.
// registered false: it did not (it withdrew what it made), and err says
// why: errRegisterAgain, or the end of a wait for another run's
// registration of an item (awaitGone), or a failed store call.
func (b Barrier) register(ctx, wctx context.Context, sess store.Session, items []int, timeout time.Duration) (registered bool, _ error) {
	for i, it := range items {
		p := store.Join(b.Dir, strconv.Itoa(it))
		_, err := b.Store.Create(ctx, p, []byte(b.ID), store.Ephemeral)
		if errors.Is(err, store.ErrNodeExists) {
			// Ours (an earlier attempt of this call), or another run's
			// of the same item: two runs of one item at once (with
			// monitorExecution off a reshard may move an item still
			// running). That registration stands for its own run: one
			// riding on it would be released by a set it had no part in,
			// even by a callback that ran before this call.
			data, st, gerr := b.Store.Get(ctx, p)
			switch {
			case errors.Is(gerr, store.ErrNoNode):
				b.withdraw(ctx, sess, items[:i])
				return false, errRegisterAgain // gone meanwhile
			case gerr != nil:
				err = gerr
			case !b.made(data, st, sess):
				b.withdraw(ctx, sess, items[:i])
				b.debug(ctx, "item registered by another run; waiting for it to go", "items", items, "item", it, "by", string(data), "owner", st.EphemeralOwner)
				return false, b.awaitGone(ctx, wctx, p, items, timeout)
			default:
				err = nil
			}
		}
		if err != nil {
			// The failed create may have been applied (a lost reply).
			b.withdraw(ctx, sess, items[:i+1])
			return false, fmt.Errorf("%s: register item %d under %s: %w", b.Name, it, b.Dir, err)
		}
	}
	return true, nil
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
func (b Barrier) missing(ctx context.Context, kids []string) (int, error) {
	registered := make(map[int]bool, len(kids))
	for _, k := range kids {
		if it, ok := itemOf(k); ok && it < b.Total {
			registered[it] = true
		}
	}
	for it := range b.Total {
		if registered[it] {
			continue
		}
		disabled, err := b.Disabled(ctx, it)
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
// with its session (registrations are ephemeral): ErrSessionEnded when
// the session they were made on is no longer the store's, else nil.
func (b Barrier) sessionGone(sess store.Session) error {
	if cur, _ := b.Store.Session(); cur.ID != sess.ID {
		return fmt.Errorf("%s: %s barrier: its registration went with the session: %w", b.Name, store.Base(b.Dir), ErrSessionEnded)
	}
	return nil
}

// clear ends the set after the callback: its registrations deleted, then
// the mark removed with the runner latch in one transaction (the
// generation moves again), none of it cancelled by ctx. The set is the
// registrations of items 0..total-1 made before the mark (their creation
// zxid below its Mzxid): one made after it (a run of an item read as
// disabled when the set completed, memstore seed 9901133) belongs to the
// next set, and one of an item beyond the total is another run's, begun
// on another total (ZooKeeper seed 1000297, memstore seed 9805454). Deleted
// with this set, either read as released to its participant, whose Once
// returned without a callback for its set. What a cut connection stops is
// owed to sess, from where it stopped.
//
// A runner whose session ended during the callback (its latch went with
// it) clears its set all the same: the mark tells its registrations from
// later ones. Left there, they counted in the next set before that run's
// participants of their items registered (ZooKeeper seed 1900373: a
// registration served by s3's callback, then by s0's after s3's expiry).
func (b Barrier) clear(ctx context.Context, c *setClear) {
	if err := c.run(context.WithoutCancel(ctx)); err != nil {
		b.Log.Warn("cannot clear the guarantee set, connection lost; clearing it when the session resumes", "node", b.Dir, "err", err)
		b.Debts.Owe(c.session, "clear "+b.Dir, c.run, nil)
	}
}

// setClear is the progress of one clear: a clear owed goes on where the
// connection stopped it.
type setClear struct {
	b       Barrier
	session int64 // the session the set was taken on
	// mark and version: the directory's Mzxid and data version the take
	// wrote (Barrier).
	mark    int64
	version int32
	latch   bool     // this clear's runner took the latch (else: another's clear, finished)
	kids    []string // the set's registrations left to delete; nil: not read yet
}

// run makes the clear's remaining writes. A lost connection stops it (the
// error: the rest is owed); any other failure is logged and the clear goes
// on, as nothing will retry it.
func (c *setClear) run(ctx context.Context) error {
	b := c.b
	failed := func(what string, err error) error {
		if err == nil || errors.Is(err, store.ErrNoNode) {
			return nil
		}
		if b.lost(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		b.Log.Warn("cannot clear guarantee node", "what", what, "err", err)
		return nil
	}
	if c.kids == nil {
		kids, err := c.members(ctx)
		if err := failed("read the set", err); err != nil {
			return err
		}
		c.kids = append(kids, "") // "": the mark's removal
	}
	for len(c.kids) > 0 {
		k := c.kids[0]
		var err error
		if k == "" {
			err = c.unmark(ctx)
		} else {
			err = b.Store.Delete(ctx, store.Join(b.Dir, k), store.AnyVersion)
		}
		if err := failed("delete "+store.Join(b.Dir, k), err); err != nil {
			return err
		}
		c.kids = c.kids[1:]
	}
	return nil
}

// members lists the set's registrations still there: those of items below
// the total made before the mark. When no child changed since the mark
// (the directory's Pzxid not past it) every registration there is; else
// each one's creation zxid is read.
func (c *setClear) members(ctx context.Context) ([]string, error) {
	b := c.b
	kids, dst, err := b.Store.Children(ctx, b.Dir)
	if err != nil {
		return nil, err
	}
	set := slices.DeleteFunc(kids, func(k string) bool {
		it, ok := itemOf(k)
		return !ok || it >= b.Total // the runner latch, or another total's item
	})
	if dst.Pzxid <= c.mark {
		return set, nil
	}
	var members []string
	for _, k := range set {
		ok, st, err := b.Store.Exists(ctx, store.Join(b.Dir, k))
		if err != nil {
			return nil, err
		}
		if ok && st.Czxid < c.mark {
			members = append(members, k)
		}
	}
	return members, nil
}

// unmark removes the set's mark (the generation moves), with the runner
// latch when this clear took it and its session still holds it. The mark
// gone already (its version moved): another participant finished this
// clear (the runner's session had ended).
func (c *setClear) unmark(ctx context.Context) error {
	b := c.b
	if cur, _ := b.Store.Session(); c.latch && cur.ID == c.session {
		_, err := b.Store.Multi(ctx,
			&store.SetOp{Path: b.Dir, Version: c.version},
			&store.DeleteOp{Path: store.Join(b.Dir, onceRunner), Version: store.AnyVersion})
		if err == nil || errors.Is(err, store.ErrBadVersion) {
			return nil
		}
		if !errors.Is(err, store.ErrNoNode) {
			return err
		}
		// The latch went with the session meanwhile.
	}
	_, err := b.Store.Set(ctx, b.Dir, nil, c.version)
	if errors.Is(err, store.ErrBadVersion) {
		return nil
	}
	return err
}

// withdraw deletes this participant's registrations of items made on sess
// (a node of the item another session registered is that participant's,
// and stays), within withdrawWait; the ones the connection keeps it from
// deleting are owed to sess (Barrier).
func (b Barrier) withdraw(ctx context.Context, sess store.Session, items []int) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawWait)
	defer cancel()
	for i, it := range items {
		if err := b.withdrawItem(dctx, sess.ID, it); err != nil {
			if b.lost(err) {
				left := slices.Clone(items[i:])
				b.Debts.Owe(sess.ID, fmt.Sprintf("withdraw %v from %s", left, b.Dir), func(ctx context.Context) error {
					for _, it := range left {
						if err := b.withdrawItem(ctx, sess.ID, it); err != nil {
							return err
						}
					}
					return nil
				}, nil)
			} else {
				b.Log.Warn("cannot withdraw a guarantee registration", "node", store.Join(b.Dir, strconv.Itoa(it)), "err", err)
			}
			return
		}
	}
}

// withdrawLeft withdraws, after a release, what is left of a participant's
// registrations of several items: registrations made one by one may fall
// on both sides of a set's mark (one of an item the set counted as
// disabled, made after it was taken), and a clear deletes only the set's.
// Left there, one would count in the next set. One read when none is left.
func (b Barrier) withdrawLeft(ctx context.Context, sess store.Session, items []int) {
	if len(items) < 2 {
		return
	}
	kids, _, err := b.Store.Children(ctx, b.Dir)
	if err != nil {
		b.withdraw(ctx, sess, items)
		return
	}
	left := slices.DeleteFunc(slices.Clone(items), func(it int) bool { return !slices.Contains(kids, strconv.Itoa(it)) })
	b.withdraw(ctx, sess, left)
}

// made reports whether a registration (its data and stat) is this
// server's on sess, or on the store's current session (the registration
// call may have gone on a session that replaced sess).
func (b Barrier) made(data []byte, st store.Stat, sess store.Session) bool {
	cur, _ := b.Store.Session()
	return string(data) == b.ID && (st.EphemeralOwner == sess.ID || st.EphemeralOwner == cur.ID)
}

// awaitGone waits, registered nowhere, until the registration at p,
// another run's, goes (its set run, or withdrawn), then has the caller
// register again; the timeout and ctx end it as they end wait.
func (b Barrier) awaitGone(ctx, wctx context.Context, p string, items []int, timeout time.Duration) error {
	for {
		ok, _, ch, err := b.Store.ExistsW(wctx, p)
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
			return fmt.Errorf("%s: %s barrier after %v (items %v; %s registered by another run; %s): %w", b.Name, store.Base(b.Dir), timeout, items, store.Base(p), b.state(ctx), ErrBarrierTimeout)
		}
		return fmt.Errorf("%s: wait on %s: %w", b.Name, p, err)
	}
}

// withdrawItem deletes item's registration if this server made it on
// session (made).
func (b Barrier) withdrawItem(ctx context.Context, session int64, item int) error {
	p := store.Join(b.Dir, strconv.Itoa(item))
	data, st, err := b.Store.Get(ctx, p)
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if !b.made(data, st, store.Session{ID: session}) {
		return nil
	}
	if err := b.Store.Delete(ctx, p, st.Version); err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrBadVersion) {
		return err
	}
	return nil
}

// lost reports whether err is a connection or session failure (the write
// may be owed), not a refusal.
func (b Barrier) lost(err error) bool {
	return LostConnection(b.Store, err) || errors.Is(err, context.DeadlineExceeded)
}

// LostConnection reports whether err, from a call on st, is a connection
// or session failure (the call may have been applied and its reply lost; a
// write it did not make may be owed: Debts) rather than a refusal or the
// caller's own cancellation.
func LostConnection(st store.Store, err error) bool {
	if errors.Is(err, store.ErrConnectionLoss) || errors.Is(err, store.ErrSessionExpired) || errors.Is(err, store.ErrClosed) {
		return true
	}
	sess, _ := st.Session()
	return sess.State != store.StateConnected && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// itemOf decodes a registration's name (an item number, canonical
// decimal); false for the runner latch and anything else.
func itemOf(name string) (int, bool) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || strconv.Itoa(n) != name {
		return 0, false
	}
	return n, true
}

// wait blocks until a runner clears this server's registration (the
// generation moved past gen), the timeout passes or ctx ends; see
// Barrier. errRegisterAgain: the registration went without a release.
//
// heldElsewhere: this participant found the set complete and the runner
// latch taken. The holder may be finishing the clear of an earlier set,
// whose registrations it read before this one was made: it then frees the
// latch without clearing this set, and nobody would run it. So the latch is
// watched too, and its release with this registration still there has the
// participant register again (find the set complete, take the latch).
func (b Barrier) wait(ctx, wctx context.Context, sess store.Session, gen int32, items []int, timeout time.Duration, heldElsewhere bool) error {
	mine := store.Join(b.Dir, strconv.Itoa(items[0]))
	runner := store.Join(b.Dir, onceRunner)
	for {
		ok, st, ch, err := b.Store.ExistsW(wctx, mine)
		// A node of another session there is another run's registration
		// of the item, made after this one went (the path is the item's).
		if err == nil && (!ok || st.EphemeralOwner != sess.ID) {
			if err := b.sessionGone(sess); err != nil {
				return err
			}
			_, st, gerr := b.Store.Get(wctx, b.Dir)
			if gerr == nil && st.Version != gen {
				b.debug(ctx, "released", "items", items, "gen", gen, "now", st.Version)
				b.withdrawLeft(ctx, sess, items)
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
			held, _, lch, lerr := b.Store.ExistsW(wctx, runner)
			if lerr == nil && !held {
				// The holder frees the latch after its clear's deletes:
				// this registration is looked at again now (seen before,
				// it may have gone since: simulation seed 9100902).
				ok, st, err := b.Store.Exists(wctx, mine)
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
			return fmt.Errorf("%s: %s barrier after %v (items %v, registered at generation %d; %s): %w", b.Name, store.Base(b.Dir), timeout, items, gen, state, ErrBarrierTimeout)
		}
		return fmt.Errorf("%s: wait on %s: %w", b.Name, mine, err)
	}
}

// debug logs a decision of the barrier with the set's registrations (each
// item's server and session), read only when debug logging is on: the
// diagnostics of a set that never completes or releases without a callback
// (the simulation prints them with a barrier violation).
func (b Barrier) debug(ctx context.Context, msg string, args ...any) {
	if !b.Log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	args = append(args, "server", b.ID, "phase", store.Base(b.Dir), "set", b.state(ctx))
	b.Log.Debug("distribute-once: "+msg, args...)
}

// state describes the set as stored now: its generation, each
// registration's item, server and session, and the runner latch's holder.
// Off the normal path (debug logging, a timeout): a read per child.
func (b Barrier) state(ctx context.Context) string {
	ctx = context.WithoutCancel(ctx)
	_, st, err := b.Store.Get(ctx, b.Dir)
	if err != nil {
		return fmt.Sprintf("unreadable: %v", err)
	}
	kids, _, err := b.Store.Children(ctx, b.Dir)
	if err != nil {
		return fmt.Sprintf("generation %d, registrations unreadable: %v", st.Version, err)
	}
	slices.Sort(kids)
	var regs []string
	for _, k := range kids {
		data, kst, err := b.Store.Get(ctx, store.Join(b.Dir, k))
		if err != nil {
			continue // gone meanwhile
		}
		regs = append(regs, fmt.Sprintf("%s=%s@0x%x", k, data, kst.EphemeralOwner))
	}
	return fmt.Sprintf("generation %d, registrations [%s]", st.Version, strings.Join(regs, " "))
}

package recipe

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/shardflow/shardflow/coord/store"
)

// Debts are writes a cut connection kept from the store, owed to the
// session they were about: a cut connection does not end a session, which
// may resume with every ephemeral node it held, so what a failed or
// ambiguous call (its transaction may have been applied, its reply lost)
// left on the session must be written when the session is connected again.
// A debt whose session ends is dropped: the nodes it was about went with
// the session. (coord owes the barrier's withdrawals, clears and runner
// latch releases, and the run records and completions of runs whose
// transaction failed in flight.)
//
// A debt's pay must be idempotent and check what it deletes (versioned,
// owned by the session, no holder in this process): it may run long after
// the failure, once or, if it fails, again at the next Pay. Its release,
// when set, runs once the debt is settled, paid or dropped with its session.
//
// The zero value is ready to use; all methods are safe for concurrent use.
type Debts struct {
	// Kept, when set, is called (with no lock held) after a debt is kept:
	// the session may have resumed since the write failed, and its owner's
	// reaction to that run before the debt was kept, so it should look at
	// the session again (and Pay).
	Kept func()
	// Log receives a line per debt paid, dropped or failed (nil: none).
	Log *slog.Logger

	mu     sync.Mutex
	owed   []debt
	paying chan struct{} // held by the Pay under way
}

type debt struct {
	session int64
	what    string
	pay     func(context.Context) error
	release func()
}

// Owe keeps a write owed to session (what names it in logs and errors),
// with a release (nil: none) to run once it is settled. It does not block.
func (d *Debts) Owe(session int64, what string, pay func(context.Context) error, release func()) {
	d.mu.Lock()
	d.owed = append(d.owed, debt{session, what, pay, release})
	d.mu.Unlock()
	if d.Kept != nil {
		d.Kept()
	}
}

// Pay makes the writes owed to sess, now connected again; a debt of
// another session is dropped (its nodes went with it).
//
// Payments are one at a time: a caller waits for the one under way before
// it takes what is left, so that a caller about to write on the session
// (coord's Once before it registers) does so only once every write owed
// before it is made or has failed. (A withdrawal paid beside a Once of the
// same session deleted what that Once had just registered, and its set
// waited for the item for good.)
//
// Blocking and cancellation: it blocks on the caller's goroutine until the
// payment under way ends, then until every debt of sess is paid or one
// fails; the pays run under ctx, and one that fails (ctx ended, the
// connection cut again) is kept with the rest for the next Pay, and its
// error returned. A suspended session pays nothing: the error says what it
// still owes (wrapping store.ErrConnectionLoss), if anything. An ended ctx
// returns at once.
func (d *Debts) Pay(ctx context.Context, sess store.Session) error {
	if sess.State == store.StateSuspended {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, o := range d.owed {
			if o.session == sess.ID {
				return fmt.Errorf("%s, owed to session 0x%x, waits for it to resume: %w", o.what, sess.ID, store.ErrConnectionLoss)
			}
		}
		return nil
	}
	d.mu.Lock()
	if d.paying == nil {
		d.paying = make(chan struct{}, 1)
	}
	paying := d.paying
	d.mu.Unlock()
	select {
	case paying <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-paying }()
	d.mu.Lock()
	owed := d.owed
	d.owed = nil
	d.mu.Unlock()
	for i, o := range owed {
		if sess.State != store.StateConnected || o.session != sess.ID {
			d.debug("a write owed to a session dropped with the session", "what", o.what, "session", o.session)
			o.settled()
			continue
		}
		if err := o.pay(ctx); err != nil {
			if d.Log != nil {
				d.Log.Warn("cannot make a write owed to this session; retrying at the next session change or Once", "what", o.what, "err", err)
			}
			d.mu.Lock()
			d.owed = append(d.owed, owed[i:]...)
			d.mu.Unlock()
			return fmt.Errorf("%s, owed to session 0x%x: %w", o.what, sess.ID, err)
		}
		d.debug("made a write owed to this session", "what", o.what)
		o.settled()
	}
	return nil
}

func (d *Debts) debug(msg string, args ...any) {
	if d.Log != nil {
		d.Log.Debug(msg, args...)
	}
}

// settled runs the debt's release, if any.
func (o debt) settled() {
	if o.release != nil {
		o.release()
	}
}

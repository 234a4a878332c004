package protocol

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/coord/store"
)

// sessionDebt is a write a cut connection kept from the store, owed to the
// session it was about: a cut connection does not end a session, which may
// resume with every ephemeral node it held, so what a failed or ambiguous
// call (its transaction may have been applied, its reply lost) left on the
// session must be written when the session is connected again. Owed so far:
// the distribute-once barrier's withdrawals, clears and runner latch
// releases (onceBarrier), the run record and live marker left by a Begin or
// a Complete whose transaction failed in flight (job.oweMarkerLeftover), and the completion of a run whose Complete
// ended while its session was suspended (job.oweCompletion).
//
// pay must be idempotent and check what it deletes (versioned, owned by
// the session, no run of this process holding it): it may run long after
// the failure, once or, if it fails, again at the next session change.
// release, when set, runs once the debt is settled, paid or dropped with
// its session (a completion's run then lets go of its items).
type sessionDebt struct {
	session int64
	what    string
	pay     func(context.Context) error
	release func()
}

// owe keeps a write owed to session for payDebts. It does not block.
func (j *Job) owe(session int64, what string, pay func(context.Context) error) {
	j.oweAndRelease(session, what, pay, nil)
}

// oweAndRelease is owe with a release to run once the debt is settled.
func (j *Job) oweAndRelease(session int64, what string, pay func(context.Context) error, release func()) {
	j.mu.Lock()
	j.owed = append(j.owed, sessionDebt{session, what, pay, release})
	j.mu.Unlock()
	// The session may have resumed since the write failed, and the
	// watcher's step for that change run before the debt was kept: it
	// looks at the session again.
	j.post(loopEvent{kind: evSession})
}

// payDebts makes the writes owed to sess, now connected again (the
// watcher on a session change, a Once before it registers, a leave); a
// debt whose session is gone is dropped (the nodes it was about went with
// the session).
//
// Payments are one at a time: a caller waits for the one under way (the
// watcher's, say) before it takes what is left, so that a Once registers
// only once every write owed before it is made or has failed. A withdrawal
// paid beside a Once of the same session deleted what that Once had just
// registered, or taken over as its own (a node of its server and session),
// and its set waited for the item for good (every participant timed out).
//
// Blocking and cancellation: it blocks on the caller's goroutine until
// the payment under way ends, then until every debt of sess is paid or one
// fails; the pays run under ctx, and one that fails (ctx ended, the
// connection cut again) is kept with the rest for the next session change
// or Once, and its error returned. A suspended session pays nothing: the
// error says what it still owes, if anything. An ended ctx returns at once.
func (j *Job) payDebts(ctx context.Context, sess store.Session) error {
	if sess.State == store.StateSuspended {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, d := range j.owed {
			if d.session == sess.ID {
				return fmt.Errorf("coord: job %q: %s, owed to session 0x%x, waits for it to resume: %w", j.jname, d.what, sess.ID, store.ErrConnectionLoss)
			}
		}
		return nil
	}
	j.mu.Lock()
	if j.paying == nil {
		j.paying = make(chan struct{}, 1)
	}
	paying := j.paying
	j.mu.Unlock()
	select {
	case paying <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-paying }()
	j.mu.Lock()
	owed := j.owed
	j.owed = nil
	j.mu.Unlock()
	for i, d := range owed {
		if sess.State != store.StateConnected || d.session != sess.ID {
			j.log.Debug("a write owed to a session dropped with the session", "what", d.what, "session", d.session)
			d.settled()
			continue
		}
		if err := d.pay(ctx); err != nil {
			j.log.Warn("cannot make a write owed to this session; retrying at the next session change or Once", "what", d.what, "err", err)
			j.mu.Lock()
			j.owed = append(j.owed, owed[i:]...)
			j.mu.Unlock()
			return fmt.Errorf("coord: job %q: %s, owed to session 0x%x: %w", j.jname, d.what, sess.ID, err)
		}
		j.log.Debug("made a write owed to this session", "what", d.what)
		d.settled()
	}
	return nil
}

// settled runs the debt's release, if any.
func (d sessionDebt) settled() {
	if d.release != nil {
		d.release()
	}
}

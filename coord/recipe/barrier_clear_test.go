package recipe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
)

// A runner clears only its set's items: a registration made while its
// callback runs, by a run of another total (runs begun during a reshard
// see different totals), of an item beyond the runner's total, is not that
// set's and must not read as released. Before the fix the clear deleted
// every registration it listed after bumping the generation, and the other
// run's Once returned nil without a callback for its set (ZooKeeper
// simulation seed 1000297: s6's Once of the "started" phase; memstore seed
// 9805454). In a synctest bubble.
func TestOnceClearKeepsRegistrationsMadeDuringTheCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		barrier := func(id string, total int) Barrier {
			st := srv.Connect()
			t.Cleanup(func() { _ = st.Close() })
			return Barrier{
				Store: st, Dir: "/ns/job/guarantee/started", ID: id, Name: "job", Log: quiet, Total: total,
				Disabled: func(context.Context, int) (bool, error) { return false, nil },
				Debts:    &Debts{},
			}
		}
		a := barrier("a", 2) // a run over items 0 and 1 of 2
		b := barrier("b", 3) // a run of item 2, begun on a total of 3

		inCallback, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			aDone <- a.Run(t.Context(), []int{0, 1}, 5*time.Second, func(context.Context) error {
				close(inCallback)
				<-release
				return nil
			})
		}()
		<-inCallback
		bDone, bRan := runNoting(t.Context(), b, []int{2}, 2*time.Second)
		synctest.Wait() // b registered item 2 and waits
		close(release)
		if err := <-aDone; err != nil {
			t.Fatalf("a's Run: %v", err)
		}
		err := <-bDone
		if err == nil && !bRan.Load() {
			t.Fatal("b's Run returned nil without a callback: released by a set it had no part in")
		}
		if !errors.Is(err, ErrBarrierTimeout) {
			t.Fatalf("b's Run = %v, want a timeout (its set, over 3 items, never completes)", err)
		}
	})
}

// A runner whose session ends during its callback (expired; the store opens
// a new one at once) loses its registrations and the runner latch with it.
// A participant that registers after that belongs to a later set, which
// must not read as released: the runner's clear on its new session deletes
// only its set's registrations (made before its mark), not this one.
// Before 1107147's fix the clear ran on the new session, bumped the
// generation and deleted that registration, and the participant's Once
// returned nil without a callback (ZooKeeper simulation seed 1107147:
// "distribute-once started: s0's Once returned without a callback having
// run during it", s1's session expired during its callback). In a synctest
// bubble.
func TestOnceRunnerWhoseSessionEndedInTheCallbackKeepsLaterRegistrations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		barrier := func(id string) (Barrier, *memstore.Session) {
			st := srv.Connect()
			t.Cleanup(func() { _ = st.Close() })
			return Barrier{
				Store: st, Dir: "/ns/job/guarantee/started", ID: id, Name: "job", Log: quiet, Total: 2,
				Disabled: func(context.Context, int) (bool, error) { return false, nil },
				Debts:    &Debts{},
			}, st
		}
		a, aSession := barrier("a") // a run over items 0 and 1: it completes its set alone
		b, _ := barrier("b")        // a later run of item 0

		inCallback, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			aDone <- a.Run(t.Context(), []int{0, 1}, 5*time.Second, func(context.Context) error {
				close(inCallback)
				<-release
				return nil
			})
		}()
		<-inCallback
		aSession.Expire() // a's registrations and latch go; a's store opens a new session
		bDone, bRan := runNoting(t.Context(), b, []int{0}, 2*time.Second)
		synctest.Wait() // b registered item 0 and waits for item 1
		close(release)
		<-aDone
		err := <-bDone
		if err == nil && !bRan.Load() {
			t.Fatal("b's Run returned nil without a callback: released by the clear of a set that ended with its runner's session")
		}
		if !errors.Is(err, ErrBarrierTimeout) {
			t.Fatalf("b's Run = %v, want a timeout (its set, item 1 missing, never completes)", err)
		}
	})
}

// runNoting starts b.Run over items with a callback that only notes that it
// ran; it returns Run's result and that note.
func runNoting(ctx context.Context, b Barrier, items []int, timeout time.Duration) (<-chan error, *atomic.Bool) {
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, items, timeout, func(context.Context) error {
			ran.Store(true)
			return nil
		})
	}()
	return done, &ran
}

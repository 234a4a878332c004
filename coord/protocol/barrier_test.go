package protocol_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/store"
)

// createsRunner reports whether c takes the runner latch of the barrier at
// base (the take: a Multi that creates it with the set's mark).
func createsRunner(c coordtest.Call, base string) bool {
	if c.Method == "Create" {
		return strings.HasSuffix(c.Path, base+"/runner")
	}
	for _, op := range c.Ops {
		if cr, ok := op.(*store.CreateOp); ok && strings.HasSuffix(cr.Path, base+"/runner") {
			return true
		}
	}
	return false
}

// TestOnceBarrierRunsOnceWhenTwoServersSeeTheSetComplete forces: a and b both register; both read the
// complete set; a takes the runner, runs the callback, clears the set and
// releases the runner; only then does b create the runner. b must see that
// its registration was cleared and not run the callback a second time.
func TestOnceBarrierRunsOnceWhenTwoServersSeeTheSetComplete(t *testing.T) {
	b := coordtest.Mem()
	h := coordtest.NewHarness(t, b)
	const base = "/guarantee/started"
	aRegistered, bRegistered, bAtRunner, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var onceRegA, onceReg, onceAt sync.Once
	// registered is an After hook closing ch once the server has created its
	// registration in the barrier's set.
	registered := func(once *sync.Once, ch chan struct{}) func(context.Context, coordtest.Call, error) error {
		return func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method == "Create" && strings.Contains(c.Path, base+"/") && !strings.HasSuffix(c.Path, base+"/runner") {
				once.Do(func() { close(ch) })
			}
			return err
		}
	}
	// The hooks are in place before the servers start (their watchers call
	// the store too) and act only on the barrier's paths. a waits for b's
	// registration before reading the set, and creates the runner only once
	// b is about to.
	sa := &coordtest.HookStore{Store: b.Connect(t),
		Before: func(_ context.Context, c coordtest.Call) error {
			switch {
			case c.Method == "Children" && strings.HasSuffix(c.Path, base):
				<-bRegistered
			case createsRunner(c, base):
				<-bAtRunner
			}
			return nil
		},
		After: registered(&onceRegA, aRegistered),
	}
	// b waits for a's registration before reading the set, and creates the
	// runner only after a is done.
	sb := &coordtest.HookStore{Store: b.Connect(t),
		Before: func(_ context.Context, c coordtest.Call) error {
			switch {
			case c.Method == "Children" && strings.HasSuffix(c.Path, base):
				<-aRegistered
			case createsRunner(c, base):
				onceAt.Do(func() { close(bAtRunner) })
				<-aDone
			}
			return nil
		},
		After: registered(&onceReg, bRegistered),
	}
	a, err := h.TryStart("a", coordtest.Config("job", 2), sa)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := h.TryStart("b", coordtest.Config("job", 2), sb)
	if err != nil {
		t.Fatal(err)
	}
	runs := coordtest.BeginAll(t, a, bs)
	items := func(i int) []int {
		var out []int
		for _, s := range runs[i].Shards() {
			out = append(out, s.Item)
		}
		return out
	}
	ia, ib := items(0), items(1)
	t.Logf("a items %v, b items %v", ia, ib)
	if len(ia) == 0 || len(ib) == 0 {
		t.Fatalf("two servers over two items: want one item each, got a %v, b %v", ia, ib)
	}
	var calls atomic.Int64
	fn := func(context.Context) error { calls.Add(1); return nil }
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(aDone)
		if err := a.Job.Once(context.Background(), "started", ia, 5*time.Second, fn); err != nil {
			t.Errorf("a: %v", err)
		}
	})
	wg.Go(func() {
		if err := bs.Job.Once(context.Background(), "started", ib, 5*time.Second, fn); err != nil {
			t.Errorf("b: %v", err)
		}
	})
	wg.Wait()
	for _, ch := range []chan struct{}{aRegistered, bRegistered, bAtRunner} {
		select {
		case <-ch:
		default:
			t.Fatal("a hook never fired: the order of events was not forced")
		}
	}
	t.Logf("callback ran %d times", calls.Load())
	if calls.Load() != 1 {
		t.Errorf("callback ran %d times for one barrier, want 1", calls.Load())
	}
	coordtest.CompleteAll(t, runs...)
}

// A participant whose wait ends with its ctx (its run cancelled) or with
// its process must not leave its registration behind: the next run's set
// would then complete as soon as the other servers registered, the
// callback run before this server's next registration, and that one wait
// out its timeout for a set already cleared (simulation seeds 126, 187,
// 296: the last trigger of a schedule timed out on a set every server
// joined). In a synctest bubble: "waiting" is every goroutine blocked.
func TestOnceParticipantsLeaveNoRegistration(t *testing.T) {
	for _, how := range []string{"cancelled", "crashed", "timed out while cut off"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := coordtest.NewHarness(t, coordtest.Mem())
				cfg := coordtest.Config("job", 2)
				a := h.Start("a", cfg)
				b := h.Start("b", cfg)
				coordtest.CompleteAll(t, coordtest.BeginAll(t, a, b)...)
				var calls atomic.Int32
				cb := func(context.Context) error { calls.Add(1); return nil }
				// a's run registers item 0 and waits for b; then it ends.
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				wait := time.Minute
				if how == "timed out while cut off" {
					wait = 3 * time.Second // within the session timeout
				}
				go func() { done <- a.Job.Once(ctx, "started", []int{0}, wait, cb) }()
				synctest.Wait()
				switch how {
				case "cancelled":
					cancel()
					if err := <-done; err == nil {
						t.Fatal("a's cancelled Once returned nil")
					}
				case "timed out while cut off":
					// Its withdrawal fails on the cut connection; the
					// session resumes, with the registration unless a's
					// job withdraws it.
					defer cancel()
					h.B.Disconnect(t, a.St)
					if err := <-done; err == nil {
						t.Fatal("a's Once returned nil while cut off")
					}
					h.B.Reconnect(t, a.St)
					synctest.Wait()
				default:
					h.B.Kill(t, a.St)
					defer cancel()
					a = h.Start("a2", cfg) // the set's other participant from now on
				}
				// The next run: b registers item 1 first. The set must not be
				// complete yet.
				bdone := make(chan error, 1)
				go func() { bdone <- b.Job.Once(context.Background(), "started", []int{1}, time.Minute, cb) }()
				synctest.Wait()
				if n := calls.Load(); n != 0 {
					t.Fatalf("%d callbacks with only b registered; want none until a's next run registers", n)
				}
				if err := a.Job.Once(context.Background(), "started", []int{0}, time.Minute, cb); err != nil {
					t.Fatalf("a's next Once: %v", err)
				}
				if err := <-bdone; err != nil {
					t.Fatalf("b's Once: %v", err)
				}
				if n := calls.Load(); n != 1 {
					t.Fatalf("%d callbacks, want 1", n)
				}
			})
		})
	}
}

// The set's completion is decided on the items' disabled flags as stored,
// not as a lagging cache holds them (simulation seed 3154899: one server,
// cut off while an operator disabled item 2, its cache not yet past the
// event when its next run's Once counted the set: it waited for item 2,
// which no server runs, and timed out). Here the cache's re-reads of item
// 2 after its flag's watch fired (the container's children, then the flag)
// are held, so the cache still shows the item enabled while a's Once counts
// the set; the callback must run all the same. In a synctest bubble: a wait
// for item 2 would be the 3 s timeout.
func TestOnceSetCountsDisabledItemsAsStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := coordtest.Mem()
		h := coordtest.NewHarness(t, b)
		item2 := "/" + h.NS + "/job/execution/2"
		var holding atomic.Bool
		release := make(chan struct{})
		hs := &coordtest.HookStore{Store: b.Connect(t), Before: func(ctx context.Context, c coordtest.Call) error {
			if (c.Method == "Children" && c.Path == item2 || c.Method == "ExistsW" && c.Path == item2+"/disabled") && holding.Load() {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}}
		a, err := h.TryStart("a", coordtest.Config("job", 3), hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
		synctest.Wait()
		holding.Store(true)
		defer close(release)
		if err := h.Admin.DisableItem(t.Context(), "job", 2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the cache's re-read of the flag is held
		var calls atomic.Int32
		err = a.Job.Once(t.Context(), "started", []int{0, 1}, 3*time.Second, func(context.Context) error {
			calls.Add(1)
			return nil
		})
		if err != nil || calls.Load() != 1 {
			t.Fatalf("Once over items 0 and 1 with item 2 disabled: %v, %d callbacks; want nil and 1", err, calls.Load())
		}
	})
}

// The runner whose connection is cut during its callback cannot clear the
// set: the registrations, the generation and the runner latch stay as they
// were, on a session that resumes when the connection returns. The clear is
// then owed: written when the session resumes (the set's other participants
// are released, as by any clear), else the set and the latch, held by a
// live session, would keep every later set of the phase from running. In a
// synctest bubble.
func TestOnceRunnerCutOffDuringTheCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2)
		a := h.Start("a", cfg)
		b := h.Start("b", cfg)
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a, b)...)
		var calls atomic.Int32
		cb := func(context.Context) error { calls.Add(1); return nil }
		// b registers item 1 and waits; a completes the set and is cut off
		// in its callback.
		bdone := make(chan error, 1)
		go func() { bdone <- b.Job.Once(context.Background(), "started", []int{1}, time.Minute, cb) }()
		synctest.Wait()
		err := a.Job.Once(context.Background(), "started", []int{0}, time.Minute, func(context.Context) error {
			calls.Add(1)
			h.B.Disconnect(t, a.St)
			return nil
		})
		if err != nil || calls.Load() != 1 {
			t.Fatalf("a's Once (its callback cut off): %v, %d callbacks; want nil and 1", err, calls.Load())
		}
		time.Sleep(5 * time.Second) // within the session timeout
		h.B.Reconnect(t, a.St)
		if err := <-bdone; err != nil {
			t.Fatalf("b's Once, its set run by a: %v; want released once a's session resumed", err)
		}
		// The next set runs as any set does.
		go func() { bdone <- b.Job.Once(context.Background(), "started", []int{1}, 10*time.Second, cb) }()
		if err := a.Job.Once(context.Background(), "started", []int{0}, 10*time.Second, cb); err != nil {
			t.Fatalf("a's next Once: %v", err)
		}
		if err := <-bdone; err != nil {
			t.Fatalf("b's next Once: %v", err)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d callbacks over two sets, want 2", n)
		}
	})
}

// A store call that fails after the participant registered (here the read
// of the set, as on a connection lost for that call) ends its Once with the
// error and must withdraw the registration, as a timeout does: left behind,
// it would complete the next set before this server's next run registered.
func TestOnceFailureAfterRegisteringWithdraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := coordtest.Mem()
		h := coordtest.NewHarness(t, b)
		base := "/" + h.NS + "/job/guarantee/started"
		var fail atomic.Bool
		hs := &coordtest.HookStore{Store: b.Connect(t), Before: func(_ context.Context, c coordtest.Call) error {
			if c.Method == "Children" && c.Path == base && fail.CompareAndSwap(true, false) {
				return store.ErrConnectionLoss
			}
			return nil
		}}
		cfg := coordtest.Config("job", 2)
		a, err := h.TryStart("a", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		bs := h.Start("b", cfg)
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a, bs)...)
		var calls atomic.Int32
		cb := func(context.Context) error { calls.Add(1); return nil }
		fail.Store(true)
		if err := a.Job.Once(context.Background(), "started", []int{0}, time.Minute, cb); !errors.Is(err, store.ErrConnectionLoss) {
			t.Fatalf("a's Once with its read of the set failing: %v, want the connection loss", err)
		}
		bdone := make(chan error, 1)
		go func() { bdone <- bs.Job.Once(context.Background(), "started", []int{1}, time.Minute, cb) }()
		synctest.Wait()
		if n := calls.Load(); n != 0 {
			t.Fatalf("%d callbacks with only b registered; want none until a's next run registers", n)
		}
		if err := a.Job.Once(context.Background(), "started", []int{0}, time.Minute, cb); err != nil {
			t.Fatalf("a's next Once: %v", err)
		}
		if err := <-bdone; err != nil || calls.Load() != 1 {
			t.Fatalf("b's Once: %v, %d callbacks; want nil and 1", err, calls.Load())
		}
	})
}

// Two runs of one item at once (monitorExecution off: a reshard may move an
// item still running on its old owner, docs/configuration.md) register the
// same node. The new owner's registration must not ride on the old run's:
// here a's run of item 0 waits in a set that b's registration of item 1
// completes, and c, the item's new owner, calls Once while b's callback
// runs. c's Once must not return as released by that callback, which
// started before c's call and ran for a set c had no part in; it waits for
// the next set. In a synctest bubble.
func TestOnceSecondRunOfAnItemWaitsForTheNextSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := coordtest.Mem()
		h := coordtest.NewHarness(t, mb)
		base := "/" + h.NS + "/job/guarantee/started"
		cWaiting := make(chan struct{})
		var once sync.Once
		hs := &coordtest.HookStore{Store: mb.Connect(t), After: func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method == "ExistsW" && c.Path == base+"/0" {
				once.Do(func() { close(cWaiting) })
			}
			return err
		}}
		cfg := coordtest.Config("job", 2)
		a := h.Start("a", cfg)
		b := h.Start("b", cfg)
		c, err := h.TryStart("c", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a, b, c)...)
		var calls atomic.Int32
		cb := func(context.Context) error { calls.Add(1); return nil }
		adone := make(chan error, 1)
		go func() { adone <- a.Job.Once(context.Background(), "started", []int{0}, time.Minute, cb) }()
		synctest.Wait()
		cdone := make(chan error, 1)
		err = b.Job.Once(context.Background(), "started", []int{1}, time.Minute, func(context.Context) error {
			calls.Add(1)
			go func() { cdone <- c.Job.Once(context.Background(), "started", []int{0}, time.Minute, cb) }()
			<-cWaiting // c has registered and waits
			return nil
		})
		if err != nil {
			t.Fatalf("b's Once: %v", err)
		}
		if err := <-adone; err != nil {
			t.Fatalf("a's Once: %v", err)
		}
		synctest.Wait()
		select {
		case err := <-cdone:
			t.Fatalf("c's Once returned (%v) with no callback run since it was called; want it waiting for the next set", err)
		default:
		}
		// The next set: b's next run completes it with c's registration.
		if err := b.Job.Once(context.Background(), "started", []int{1}, time.Minute, cb); err != nil {
			t.Fatalf("b's next Once: %v", err)
		}
		if err := <-cdone; err != nil || calls.Load() != 2 {
			t.Fatalf("c's Once: %v, %d callbacks in all; want nil and 2", err, calls.Load())
		}
	})
}

// A participant that found its set complete with the latch taken watches
// its registration and the latch. Here a and b both see the set complete, b
// takes the latch, and a reads its registration (still there) just before
// b's callback returns and b clears the set and frees the latch; a then
// finds the latch free. Its registration went with b's clear: a is
// released, not registered again for a set nobody else joins (simulation
// seed 9100902: it registered again and timed out). In a synctest bubble.
func TestOnceWaiterSeesTheLatchFreedAfterItsRegistrationWent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := coordtest.Mem()
		h := coordtest.NewHarness(t, mb)
		base := "/" + h.NS + "/job/guarantee/started"
		aReg, bReg, bRunning, aAtMine, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		var armed atomic.Bool // the hooks act only during the Once calls
		var aOnce, bOnce, mineOnce sync.Once
		sa := &coordtest.HookStore{Store: mb.Connect(t),
			Before: func(_ context.Context, c coordtest.Call) error {
				switch {
				case !armed.Load():
				case c.Method == "Children" && c.Path == base:
					<-bReg
				case c.Method == "Create" && c.Path == base+"/runner":
					<-bRunning
				}
				return nil
			},
			After: func(_ context.Context, c coordtest.Call, err error) error {
				switch {
				case !armed.Load():
				case c.Method == "Create" && c.Path == base+"/0":
					aOnce.Do(func() { close(aReg) })
				case c.Method == "ExistsW" && c.Path == base+"/0":
					mineOnce.Do(func() {
						close(aAtMine)
						<-bDone
					})
				}
				return err
			},
		}
		sb := &coordtest.HookStore{Store: mb.Connect(t),
			Before: func(_ context.Context, c coordtest.Call) error {
				if armed.Load() && c.Method == "Children" && c.Path == base {
					<-aReg
				}
				return nil
			},
			After: func(_ context.Context, c coordtest.Call, err error) error {
				if armed.Load() && c.Method == "Create" && c.Path == base+"/1" {
					bOnce.Do(func() { close(bReg) })
				}
				return err
			},
		}
		cfg := coordtest.Config("job", 2)
		a, err := h.TryStart("a", cfg, sa)
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.TryStart("b", cfg, sb)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, a, b)...)
		synctest.Wait()
		armed.Store(true)
		var calls atomic.Int32
		adone := make(chan error, 1)
		go func() {
			adone <- a.Job.Once(context.Background(), "started", []int{0}, time.Minute, func(context.Context) error {
				calls.Add(1)
				return nil
			})
		}()
		err = b.Job.Once(context.Background(), "started", []int{1}, time.Minute, func(context.Context) error {
			calls.Add(1)
			close(bRunning)
			<-aAtMine
			return nil
		})
		close(bDone)
		if err != nil {
			t.Fatalf("b's Once: %v", err)
		}
		if err := <-adone; err != nil || calls.Load() != 1 {
			t.Fatalf("a's Once: %v, %d callbacks; want nil (released by b's) and 1", err, calls.Load())
		}
	})
}

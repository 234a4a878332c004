package protocol_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// cutReply is a HookStore's After hook for the next Multi once armed: the
// Multi is applied; then, with hold set, the reply waits for release (a
// slow reply), and otherwise it is a connection loss (a reply lost when the
// connection dropped).
type cutReply struct {
	armed   atomic.Bool
	hold    chan struct{} // non-nil: closed once the armed Multi is applied
	release chan struct{}
}

func (c *cutReply) after(_ context.Context, call coordtest.Call, err error) error {
	if call.Method != "Multi" || err != nil || !c.armed.CompareAndSwap(true, false) {
		return err
	}
	if c.hold == nil {
		return fmt.Errorf("cutReply: %w", store.ErrConnectionLoss)
	}
	close(c.hold)
	<-c.release
	return nil
}

func startCut(t *testing.T, total int) (*coordtest.Harness, *cutReply, *coordtest.Server) {
	t.Helper()
	h := coordtest.NewHarness(t, coordtest.Mem())
	cut := &cutReply{}
	s, err := h.TryStart("a", coordtest.Config("job", total), &coordtest.HookStore{Store: h.B.Connect(t), After: cut.after})
	if err != nil {
		t.Fatal(err)
	}
	// Resharded: the next Begin's first transaction is the one that marks
	// its items running.
	coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
	return h, cut, s
}

// A Begin whose transaction was applied but whose reply was lost fails;
// the running nodes it left, ephemerals of a session that lives on, are
// removed by the next Begin, which runs the items (before, that Begin
// failed once more with "node already exists").
func TestBeginAfterLostReply(t *testing.T) {
	_, st, s := startCut(t, 2)
	st.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Job.Begin(ctx, time.Now()); !errors.Is(err, store.ErrConnectionLoss) {
		t.Fatalf("Begin with its reply lost: %v, want the connection loss", err)
	}
	if st.armed.Load() {
		t.Fatal("the Begin sent no transaction")
	}
	runs := coordtest.BeginAll(t, s)
	coordtest.AssertPartition(t, 2, runs...)
	coordtest.CompleteAll(t, runs...)
}

// A Begin beside one whose transaction has been applied but has not
// returned yet (the Node's failover runner beside a busy run) must see the
// first one's running nodes as running, not as leftovers to delete:
// deleting them would run the items twice at once.
func TestBeginBesideBeginInFlight(t *testing.T) {
	h, st, s := startCut(t, 1)
	st.hold, st.release = make(chan struct{}), make(chan struct{})
	st.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		run *protocol.Run
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := s.Job.Begin(ctx, time.Now())
		first <- result{r, err}
	}()
	<-st.hold // the first Begin's running node exists; its Begin has not returned
	if _, err := s.Job.Begin(ctx, time.Now()); !errors.Is(err, protocol.ErrItemsRunning) {
		t.Fatalf("Begin beside a Begin in flight: %v, want ErrItemsRunning", err)
	}
	close(st.release)
	res := <-first
	if res.err != nil {
		t.Fatalf("first Begin: %v", res.err)
	}
	stat, err := h.Admin.Status(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !stat.Items[0].Running {
		t.Fatalf("item 0 while the first run runs: %+v, want its running node kept", stat.Items[0])
	}
	coordtest.CompleteAll(t, res.run)
}

// A Begin of a server that is not the leader is applied, then the
// connection drops before its reply (the Begin fails), and the same session
// resumes: the live marker the transaction created stays, an ephemeral of a
// live session, with no run holding it. It is owed to the session and
// removed as soon as the session is connected again, so the leader can
// reshard for a joiner at once. Before, only this server's next Begin
// removed it (a cron period later): the joiner's Begin waited out its 10 s
// bound. In a synctest bubble.
func TestLostBeginReplyDoesNotHoldTheReshard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 3)
		leader := h.Start("a", cfg)
		var armed atomic.Bool
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		hs.After = func(_ context.Context, c coordtest.Call, err error) error {
			if c.Method != "Multi" || err != nil || !armed.CompareAndSwap(true, false) {
				return err
			}
			h.B.Disconnect(t, hs.Store) // applied; the reply is lost with the connection
			return fmt.Errorf("lost reply: %w", store.ErrConnectionLoss)
		}
		b, err := h.TryStart("b", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader, b)...)
		synctest.Wait()
		armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.Job.Begin(ctx, time.Now()); err == nil {
			t.Fatal("b's Begin with its reply lost succeeded")
		}
		if armed.Load() {
			t.Fatal("b's Begin sent no transaction")
		}
		marker := "/" + h.NS + "/job/servers/b/run/live"
		if ok, _, err := h.AdminStore.Exists(ctx, marker); err != nil || !ok {
			t.Fatalf("b's live marker after the lost reply: %v, %v; want it left on the suspended session", ok, err)
		}
		time.Sleep(2 * time.Second) // within the session timeout
		h.B.Reconnect(t, hs.Store)
		synctest.Wait()
		joiner := h.Start("c", cfg)
		run, err := joiner.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("joiner's Begin: %v (the leader never resharded: b's leftover marker held it)", err)
		}
		if len(run.Shards()) == 0 {
			t.Fatal("joiner's run has no items after the reshard")
		}
		coordtest.CompleteAll(t, run)
	})
}

// A Complete whose every attempt fails on the connection (not applied)
// leaves the run's live marker on a session that lives on; its delete is
// owed to the session, so the leader can reshard for a joiner without
// another Begin of that server. In a synctest bubble.
func TestCutCompleteDoesNotHoldTheReshard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 3)
		leader := h.Start("a", cfg)
		var failing atomic.Int32
		hs := &coordtest.HookStore{Store: h.B.Connect(t)}
		hs.Before = func(_ context.Context, c coordtest.Call) error {
			if c.Method == "Multi" && failing.Add(-1) >= 0 {
				return fmt.Errorf("cut: %w", store.ErrConnectionLoss)
			}
			return nil
		}
		b, err := h.TryStart("b", cfg, hs)
		if err != nil {
			t.Fatal(err)
		}
		coordtest.CompleteAll(t, coordtest.BeginAll(t, leader, b)...)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		run, err := b.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		failing.Store(3) // every attempt of the Complete
		if err := run.Complete(ctx, time.Time{}); err == nil {
			t.Fatal("b's Complete with every attempt cut off succeeded")
		}
		failing.Store(0)
		synctest.Wait()
		joiner := h.Start("c", cfg)
		jr, err := joiner.Job.Begin(ctx, time.Now())
		if err != nil {
			t.Fatalf("joiner's Begin: %v (the leader never resharded: b's leftover marker held it)", err)
		}
		if len(jr.Shards()) == 0 {
			t.Fatal("joiner's run has no items after the reshard")
		}
		coordtest.CompleteAll(t, jr)
	})
}

package coord_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
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
		run *coord.Run
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := s.Job.Begin(ctx, time.Now())
		first <- result{r, err}
	}()
	<-st.hold // the first Begin's running node exists; its Begin has not returned
	if _, err := s.Job.Begin(ctx, time.Now()); !errors.Is(err, coord.ErrItemsRunning) {
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

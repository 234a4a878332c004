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

// cutReply applies the next Multi once armed; then, with hold set, it
// waits for release before replying (a slow reply), and otherwise it
// reports a connection loss (a reply lost when the connection dropped).
type cutReply struct {
	store.Store
	armed   atomic.Bool
	hold    chan struct{} // non-nil: closed once the armed Multi is applied
	release chan struct{}
}

func (c *cutReply) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	res, err := c.Store.Multi(ctx, ops...)
	if err != nil || !c.armed.CompareAndSwap(true, false) {
		return res, err
	}
	if c.hold == nil {
		return nil, fmt.Errorf("cutReply: %w", store.ErrConnectionLoss)
	}
	close(c.hold)
	<-c.release
	return res, err
}

func startCut(t *testing.T, total int) (*coordtest.Harness, *cutReply, *coordtest.Server) {
	t.Helper()
	h := coordtest.NewHarness(t, coordtest.Mem())
	st := &cutReply{Store: h.B.Connect(t)}
	s, err := h.TryStart("a", coordtest.Config("job", total), st)
	if err != nil {
		t.Fatal(err)
	}
	// Resharded: the next Begin's first transaction is the one that marks
	// its items running.
	coordtest.CompleteAll(t, coordtest.BeginAll(t, s)...)
	return h, st, s
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

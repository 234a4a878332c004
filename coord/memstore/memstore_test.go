package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/storetest"
	"github.com/shardflow/shardflow/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitFor = 10 * time.Second

func connect(t *testing.T, srv *memstore.Server, opts ...memstore.SessionOption) *memstore.Session {
	t.Helper()
	s := srv.Connect(opts...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// awaitEvent returns the one event of a watch channel, failing after waitFor.
func awaitEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	return testwait.Recv(t, waitFor, "a watch event", ch)
}

func noEvent(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected watch event %+v", ev)
	default:
	}
}

// awaitState waits until the session reports want, following the change channel.
func awaitState(t *testing.T, s store.Store, want store.State) store.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cur, err := store.AwaitSession(ctx, s, func(cur store.Session) bool { return cur.State == want })
	if err != nil {
		t.Fatalf("session state %v, want %v within %v", cur.State, want, waitFor)
	}
	return cur
}

func TestDisconnectWithinTimeoutKeepsSession(t *testing.T) {
	ctx := context.Background()
	srv := memstore.NewServer()
	a := connect(t, srv)
	b := connect(t, srv)
	if _, err := a.Create(ctx, "/eph", []byte("a"), store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, "/data", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, _, dataW, err := a.GetW(ctx, "/data")
	if err != nil {
		t.Fatal(err)
	}
	before, changed := a.Session()

	a.Disconnect()
	<-changed // Disconnect notifies synchronously.
	if got, _ := a.Session(); got.State != store.StateSuspended || got.ID != before.ID {
		t.Fatalf("after Disconnect: %+v, want suspended with id %x", got, before.ID)
	}
	if _, _, err := a.Get(ctx, "/data"); !errors.Is(err, store.ErrConnectionLoss) {
		t.Fatalf("Get while disconnected: %v, want ErrConnectionLoss", err)
	}
	if ok, _, err := b.Exists(ctx, "/eph"); err != nil || !ok {
		t.Fatalf("ephemeral of a suspended session: exists=%v err=%v, want kept", ok, err)
	}
	// A change while disconnected is held back until the reconnect.
	if _, err := b.Set(ctx, "/data", []byte("x"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	noEvent(t, dataW)

	a.Reconnect()
	got := awaitState(t, a, store.StateConnected)
	if got.ID != before.ID {
		t.Fatalf("reconnect within the timeout changed the id: %x -> %x", before.ID, got.ID)
	}
	if ev := awaitEvent(t, dataW); ev.Type != store.EventNodeDataChanged || ev.Path != "/data" {
		t.Fatalf("held-back event %+v, want data-changed /data", ev)
	}
	if ok, st, err := b.Exists(ctx, "/eph"); err != nil || !ok || st.EphemeralOwner != before.ID {
		t.Fatalf("ephemeral after reconnect: exists=%v owner=%x err=%v", ok, st.EphemeralOwner, err)
	}
}

// The session timeout runs out on the fake clock of a synctest bubble: the
// test neither sleeps nor depends on the machine's speed.
func TestDisconnectPastTimeoutExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memstore.NewServer()
		a := connect(t, srv, memstore.WithSessionTimeout(50*time.Millisecond))
		b := connect(t, srv)
		if _, err := a.Create(ctx, "/eph", nil, store.Ephemeral); err != nil {
			t.Fatal(err)
		}
		_, _, ownW, err := a.ExistsW(ctx, "/other")
		if err != nil {
			t.Fatal(err)
		}
		_, _, peerW, err := b.ExistsW(ctx, "/eph")
		if err != nil {
			t.Fatal(err)
		}
		before, _ := a.Session()
		if before.Timeout != 50*time.Millisecond {
			t.Fatalf("Timeout %v, want 50ms", before.Timeout)
		}

		a.Disconnect()
		awaitState(t, a, store.StateLost)
		if ev := awaitEvent(t, peerW); ev.Type != store.EventNodeDeleted {
			t.Fatalf("peer watch on the expired ephemeral: %+v, want deleted", ev)
		}
		ev := awaitEvent(t, ownW)
		if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrSessionExpired) {
			t.Fatalf("own watch after expiry: %+v, want not-watching with ErrSessionExpired", ev)
		}
		if _, _, err := a.Get(ctx, "/"); !errors.Is(err, store.ErrConnectionLoss) {
			t.Fatalf("Get while lost: %v, want ErrConnectionLoss", err)
		}

		a.Reconnect()
		after := awaitState(t, a, store.StateConnected)
		if after.ID == before.ID {
			t.Fatalf("reconnect after expiry kept id %x, want a new one", after.ID)
		}
		if _, err := a.Create(ctx, "/eph", nil, store.Ephemeral); err != nil {
			t.Fatalf("re-creating the ephemeral on the new session: %v", err)
		}
		if _, st, err := b.Get(ctx, "/eph"); err != nil || st.EphemeralOwner != after.ID {
			t.Fatalf("new ephemeral owner %x err %v, want %x", st.EphemeralOwner, err, after.ID)
		}
	})
}

func TestExpireWhileDisconnectedStaysLostUntilReconnect(t *testing.T) {
	srv := memstore.NewServer()
	a := connect(t, srv)
	before, _ := a.Session()
	a.Disconnect()
	a.Expire()
	if got, _ := a.Session(); got.State != store.StateLost {
		t.Fatalf("state %v, want lost", got.State)
	}
	a.Reconnect()
	if got, _ := a.Session(); got.State != store.StateConnected || got.ID == before.ID {
		t.Fatalf("after reconnect: %+v, want connected with a new id", got)
	}
}

func TestCloseWhileDisconnectedStopsTimer(t *testing.T) {
	srv := memstore.NewServer()
	b := connect(t, srv)
	a := srv.Connect(memstore.WithSessionTimeout(time.Hour))
	if _, err := a.Create(context.Background(), "/eph", nil, store.Ephemeral); err != nil {
		t.Fatal(err)
	}
	a.Disconnect()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Session(); got.State != store.StateClosed {
		t.Fatalf("state %v, want closed", got.State)
	}
	if ok, _, err := b.Exists(context.Background(), "/eph"); err != nil || ok {
		t.Fatalf("ephemeral after Close: exists=%v err=%v, want deleted at once", ok, err)
	}
	// goleak in TestMain checks that the hour-long timer did not survive.
}

func TestStatsCountRequests(t *testing.T) {
	ctx := context.Background()
	srv := memstore.NewServer()
	s := connect(t, srv)
	if _, err := s.Create(ctx, "/a", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "/a", []byte("1"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "/a"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.ChildrenW(ctx, "/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Multi(ctx,
		&store.CheckOp{Path: "/a", Version: 1},
		&store.CreateOp{Path: "/a/b", Mode: store.Persistent},
		&store.SetOp{Path: "/a", Data: []byte("2"), Version: 1},
	); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "/missing", store.AnyVersion); !errors.Is(err, store.ErrNoNode) {
		t.Fatalf("Delete missing: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = s.Create(cancelled, "/refused", nil, store.Persistent) // not counted

	got := srv.Stats()
	want := memstore.Stats{
		Requests: 6, // create, set, get, children, multi, delete
		Reads:    2,
		WriteOps: 5, // create, set, 2 writes of the multi, delete
		Multis:   1,
		Watches:  0, // the child watch fired on /a/b's creation
		Sessions: 1,
		Zxid:     3, // create, set, multi; the failed delete takes none
	}
	if got != want {
		t.Fatalf("Stats() = %+v\nwant      %+v", got, want)
	}
	if srv.WriteCount() != 5 {
		t.Fatalf("WriteCount() = %d, want 5", srv.WriteCount())
	}
}

func TestClockIsTheServers(t *testing.T) {
	ctx := context.Background()
	skewed := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	srv := memstore.NewServer(memstore.WithClock(func() time.Time { return skewed }))
	s := connect(t, srv)
	if _, err := s.Create(ctx, "/n", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, st, err := s.Get(ctx, "/n")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ctime.Equal(skewed) || !st.Mtime.Equal(skewed) {
		t.Fatalf("Ctime %v Mtime %v, want the server clock %v", st.Ctime, st.Mtime, skewed)
	}
	later := skewed.Add(time.Hour)
	srv.SetClock(func() time.Time { return later })
	st, err = s.Set(ctx, "/n", []byte("x"), store.AnyVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mtime.Equal(later) || !st.Ctime.Equal(skewed) {
		t.Fatalf("after SetClock: Ctime %v Mtime %v, want %v and %v", st.Ctime, st.Mtime, skewed, later)
	}
	if !srv.Now().Equal(later) {
		t.Fatalf("Now() = %v, want %v", srv.Now(), later)
	}
}

// A watcher that reacts to an event by calling the store must not deadlock:
// events are delivered on buffered channels, never under a blocking send.
func TestWatcherMayCallBackIntoStore(t *testing.T) {
	ctx := context.Background()
	srv := memstore.NewServer()
	s := connect(t, srv)
	if _, err := s.Create(ctx, "/n", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, _, w, err := s.GetW(ctx, "/n")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		<-w
		_, _, err := s.Get(ctx, "/n")
		done <- err
	}()
	if _, err := s.Set(ctx, "/n", []byte("x"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("watcher calling back into the store did not return")
	}
}

// harness runs the conformance suite on one Server per test.
type harness struct{}

func (harness) NewSession(t *testing.T) store.Store {
	return serverOf(t).Connect()
}

func (harness) Expire(t *testing.T, s store.Store) {
	ms, ok := s.(*memstore.Session)
	if !ok {
		t.Fatalf("Expire: %T is not a *memstore.Session", s)
	}
	ms.Expire()
}

func (harness) Root(t *testing.T) string {
	s := serverOf(t).Connect()
	defer s.Close()
	const root = "/conformance"
	if err := store.CreateAll(context.Background(), s, root); err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	serversMu sync.Mutex
	servers   = map[*testing.T]*memstore.Server{}
)

// serverOf returns the test's server, so every subtest gets a fresh tree.
func serverOf(t *testing.T) *memstore.Server {
	serversMu.Lock()
	defer serversMu.Unlock()
	srv := servers[t]
	if srv == nil {
		srv = memstore.NewServer()
		servers[t] = srv
		t.Cleanup(func() {
			serversMu.Lock()
			delete(servers, t)
			serversMu.Unlock()
		})
	}
	return srv
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness{})
}

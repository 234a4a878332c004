package zkstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/faultproxy"
	"github.com/shardflow/shardflow/internal/testwait"
)

func TestDigestAuthProtectsCreatedNodes(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)

	p := faultproxy.New(t, servers[0])
	owner := open(t, zkstore.Config{Servers: []string{p.Addr()}, Auth: "alice:secret", WorldReadable: true})
	anon := open(t, zkstore.Config{})
	intruder := open(t, zkstore.Config{Auth: "alice:wrong"})
	peer := open(t, zkstore.Config{Auth: "alice:secret"})

	readable := base + "/readable"
	if _, err := owner.Create(ctx, readable, []byte("v1"), store.Persistent); err != nil {
		t.Fatal(err)
	}
	// Deleting a node needs DELETE on its parent: protect a child.
	kid := readable + "/kid"
	if _, err := owner.Create(ctx, kid, nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Delete(context.Background(), kid, store.AnyVersion) }) // before base's cleanup
	for name, s := range map[string]store.Store{"unauthenticated": anon, "wrong password": intruder} {
		if _, err := s.Set(ctx, readable, []byte("x"), store.AnyVersion); !errors.Is(err, store.ErrNoAuth) {
			t.Errorf("%s Set: %v, want ErrNoAuth", name, err)
		}
		if err := s.Delete(ctx, kid, store.AnyVersion); !errors.Is(err, store.ErrNoAuth) {
			t.Errorf("%s Delete under a protected node: %v, want ErrNoAuth", name, err)
		}
		if _, err := s.Create(ctx, readable+"/child", nil, store.Persistent); !errors.Is(err, store.ErrNoAuth) {
			t.Errorf("%s Create under a protected node: %v, want ErrNoAuth", name, err)
		}
		if data, _, err := s.Get(ctx, readable); err != nil || string(data) != "v1" {
			t.Errorf("%s Get with WorldReadable: %q, %v; want v1", name, data, err)
		}
	}
	if _, err := peer.Set(ctx, readable, []byte("v2"), store.AnyVersion); err != nil {
		t.Fatalf("Set by another session with the same credentials: %v", err)
	}

	// Without WorldReadable nobody else may even read.
	private := open(t, zkstore.Config{Auth: "bob:pw"})
	hidden := base + "/hidden"
	if _, err := private.Create(ctx, hidden, nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = private.Delete(context.Background(), hidden, store.AnyVersion) }) // before base's cleanup
	if _, _, err := anon.Get(ctx, hidden); !errors.Is(err, store.ErrNoAuth) {
		t.Fatalf("unauthenticated Get of a private node: %v, want ErrNoAuth", err)
	}

	// The credentials survive a new session: the store re-installs them on
	// the client it dials after a loss, before any call goes through.
	before, _ := owner.Session()
	p.Cut()
	awaitState(t, owner, 4*testSessionTimeout, "owner lost", func(s store.Session) bool { return s.State == store.StateLost })
	p.Restore()
	after := awaitState(t, owner, 4*testSessionTimeout, "owner reconnected", func(s store.Session) bool {
		return s.State == store.StateConnected && s.ID != before.ID
	})
	if _, err := owner.Set(ctx, readable, []byte("v3"), store.AnyVersion); err != nil {
		t.Fatalf("Set on the new session 0x%x: %v (credentials not re-installed)", after.ID, err)
	}
	if _, err := owner.Create(ctx, base+"/made-after-expiry", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Set(ctx, base+"/made-after-expiry", nil, store.AnyVersion); !errors.Is(err, store.ErrNoAuth) {
		t.Fatalf("node created on the new session is writable by others: %v", err)
	}
}

func TestPartitionLongerThanTimeoutIsLostThenNewSession(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	p := faultproxy.New(t, servers[0])
	s := open(t, zkstore.Config{Servers: []string{p.Addr()}})

	eph, err := s.Create(ctx, base+"/eph", nil, store.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.GetW(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Session()
	if before.Timeout != testSessionTimeout {
		t.Fatalf("negotiated timeout %v, want %v (is the server's tickTime <= 1s?)", before.Timeout, testSessionTimeout)
	}

	cut := time.Now()
	p.Cut()
	susp := awaitState(t, s, before.Timeout, "suspended", func(c store.Session) bool { return c.State != store.StateConnected })
	if susp.State != store.StateSuspended || susp.ID != before.ID {
		t.Fatalf("after the cut: %v 0x%x, want suspended with the same session 0x%x", susp.State, susp.ID, before.ID)
	}
	suspendedAfter := time.Since(cut)

	// A call during the partition is bounded by its context.
	callCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, _, err = s.Get(callCtx, base)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrConnectionLoss) {
		t.Fatalf("Get during a partition: %v, want DeadlineExceeded or ErrConnectionLoss", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Get during a partition returned after %v, want about 200ms", d)
	}

	lost := awaitState(t, s, 3*before.Timeout, "lost", func(c store.Session) bool { return c.State == store.StateLost })
	lostAfter := time.Since(cut)
	if lostAfter < before.Timeout {
		t.Fatalf("lost after %v, before the session timeout %v", lostAfter, before.Timeout)
	}
	ev := recvEvent(t, watch, "watch of the lost session") // fired when the store gave the session up, before reconnecting
	if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrSessionExpired) {
		t.Fatalf("watch of the lost session: %v %v, want not-watching with ErrSessionExpired", ev.Type, ev.Err)
	}
	// Other sessions see the ephemeral go once the server expires it.
	testwait.ForNoError(t, 3*before.Timeout, "the server to expire the lost session's ephemeral", func() error {
		ok, _, err := admin.Exists(ctx, eph)
		if err == nil && ok {
			err = fmt.Errorf("ephemeral %s still exists %v after the cut", eph, time.Since(cut).Round(time.Millisecond))
		}
		return err
	})

	p.Restore()
	after := awaitState(t, s, 4*before.Timeout, "reconnected", func(c store.Session) bool { return c.State == store.StateConnected })
	if after.ID == before.ID || after.ID == 0 {
		t.Fatalf("reconnected with session 0x%x, want a new session (old 0x%x)", after.ID, before.ID)
	}
	if _, err := s.Create(ctx, eph, nil, store.Ephemeral); err != nil {
		t.Fatalf("re-creating the ephemeral on the new session: %v", err)
	}
	t.Logf("cut -> suspended %v, -> lost %v (timeout %v, lost id 0x%x), new session 0x%x", suspendedAfter, lostAfter, before.Timeout, lost.ID, after.ID)
}

func TestShortDisconnectResumesTheSameSession(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	p := faultproxy.New(t, servers[0])
	s := open(t, zkstore.Config{Servers: []string{p.Addr()}})

	eph, err := s.Create(ctx, base+"/eph", nil, store.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.GetW(ctx, eph)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Session()

	p.Cut()
	awaitState(t, s, before.Timeout, "suspended", func(c store.Session) bool { return c.State == store.StateSuspended })
	p.Restore()
	after := awaitState(t, s, before.Timeout, "reconnected", func(c store.Session) bool { return c.State == store.StateConnected })
	if after.ID != before.ID {
		t.Fatalf("reconnected with session 0x%x, want the same 0x%x", after.ID, before.ID)
	}
	ok, st, err := admin.Exists(ctx, eph)
	if err != nil || !ok || st.EphemeralOwner != before.ID {
		t.Fatalf("ephemeral after a short disconnect: exists %v owner 0x%x err %v, want kept by 0x%x", ok, st.EphemeralOwner, err, before.ID)
	}
	// The watch armed before the disconnect was re-registered and still fires.
	if _, err := admin.Set(ctx, eph, []byte("x"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-watch:
		if ev.Type != store.EventNodeDataChanged || ev.Path != eph {
			t.Fatalf("watch after reconnect: %v %q, want data-changed %q", ev.Type, ev.Path, eph)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch armed before the disconnect did not fire after it")
	}

	// DropConnections, the store's own fault hook, does the same.
	if n := s.DropConnections(); n != 1 {
		t.Fatalf("DropConnections cut %d connections, want 1", n)
	}
	awaitState(t, s, before.Timeout, "suspended after DropConnections", func(c store.Session) bool { return c.State == store.StateSuspended })
	again := awaitState(t, s, 2*before.Timeout, "reconnected after DropConnections", func(c store.Session) bool {
		return c.State == store.StateConnected
	})
	if again.ID != before.ID {
		t.Fatalf("after DropConnections: session 0x%x, want 0x%x", again.ID, before.ID)
	}
	if _, _, err := s.Get(ctx, eph); err != nil {
		t.Fatalf("Get after DropConnections: %v", err)
	}
}

// A change made while the connection is cut fires, once the same session
// resumes, the watches armed before the cut: the client re-registers them
// with the last zxid it saw, and the server reports what changed since.
// (A cache that missed this would stay blind after every blip; the
// ensemble fault test's workers are the users who would see it.)
func TestChangeDuringDisconnectFiresWatchesAfterResume(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	p := faultproxy.New(t, servers[0])
	s := open(t, zkstore.Config{Servers: []string{p.Addr()}})

	node := base + "/n"
	if _, err := admin.Create(ctx, node, nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	_, _, dataW, err := s.GetW(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	_, _, childW, err := s.ChildrenW(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Session()

	p.Cut()
	awaitState(t, s, before.Timeout, "suspended", func(c store.Session) bool { return c.State == store.StateSuspended })
	if _, err := admin.Set(ctx, node, []byte("during the cut"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(ctx, base+"/new", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-dataW:
		t.Fatalf("watch fired while the connection was cut: %+v", ev)
	default:
	}
	p.Restore()
	after := awaitState(t, s, before.Timeout, "reconnected", func(c store.Session) bool { return c.State == store.StateConnected })
	if after.ID != before.ID {
		t.Fatalf("reconnected with session 0x%x, want the same 0x%x", after.ID, before.ID)
	}
	for _, w := range []struct {
		name string
		ch   <-chan store.Event
		typ  store.EventType
		path string
	}{{"data", dataW, store.EventNodeDataChanged, node}, {"children", childW, store.EventNodeChildrenChanged, base}} {
		ev := testwait.Recv(t, 10*time.Second, "the "+w.name+" watch armed before the cut, for the change made during it", w.ch)
		if ev.Type != w.typ || ev.Path != w.path {
			t.Fatalf("%s watch after the resume: %v %q, want %v %q", w.name, ev.Type, ev.Path, w.typ, w.path)
		}
	}
}

func TestRootIsANamespace(t *testing.T) {
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	root := base + "/ns/deep"
	s := open(t, zkstore.Config{Root: root})

	got, err := s.Create(ctx, "/job", []byte("d"), store.Persistent)
	if err != nil || got != "/job" {
		t.Fatalf("Create /job under Root: %q, %v", got, err)
	}
	if data, _, err := admin.Get(ctx, root+"/job"); err != nil || string(data) != "d" {
		t.Fatalf("node at the real path: %q, %v", data, err)
	}
	seq, err := s.Create(ctx, "/job/n-", nil, store.EphemeralSequential)
	if err != nil || seq != "/job/n-0000000000" {
		t.Fatalf("sequential under Root: %q, %v; want /job/n-0000000000", seq, err)
	}
	names, _, err := s.Children(ctx, "/")
	if err != nil || len(names) != 1 || names[0] != "job" {
		t.Fatalf("Children(/) under Root: %v, %v", names, err)
	}
	_, _, ch, err := s.ChildrenW(ctx, "/job")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Multi(ctx, &store.CreateOp{Path: "/job/m-", Mode: store.PersistentSequential}, &store.SetOp{Path: "/job", Data: []byte("e"), Version: 0})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Path != "/job/m-0000000001" || res[1].Path != "/job" || res[1].Stat.Version != 1 {
		t.Fatalf("Multi results under Root: %+v", res)
	}
	select {
	case ev := <-ch:
		if ev.Type != store.EventNodeChildrenChanged || ev.Path != "/job" {
			t.Fatalf("event under Root: %v %q, want children-changed /job", ev.Type, ev.Path)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event under Root")
	}
	if err := s.Delete(ctx, "/", store.AnyVersion); !errors.Is(err, store.ErrBadPath) {
		t.Fatalf("Delete(/) under Root: %v, want ErrBadPath", err)
	}
}

func TestMultiNamesTheFailingOpNotTheRolledBackOnes(t *testing.T) {
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	if _, err := admin.Create(ctx, base+"/a", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	ops := []store.Op{
		&store.CreateOp{Path: base + "/b"},
		&store.SetOp{Path: base + "/a", Version: 0},
		&store.CheckOp{Path: base + "/a", Version: 7},
		&store.CreateOp{Path: base + "/c"},
		&store.DeleteOp{Path: base + "/a", Version: store.AnyVersion},
	}
	_, err := admin.Multi(ctx, ops...)
	var me *store.MultiError
	if !errors.As(err, &me) || me.Index != 2 || me.Op != ops[2] || !errors.Is(err, store.ErrBadVersion) {
		t.Fatalf("Multi error %v, want *MultiError at index 2 wrapping ErrBadVersion", err)
	}
	ok, _, _ := admin.Exists(ctx, base+"/b")
	if ok {
		t.Fatal("a failed Multi applied its first operation")
	}
	_, err = admin.Multi(ctx, &store.CreateOp{Path: base + "/x/y"})
	if !errors.As(err, &me) || me.Index != 0 || !errors.Is(err, store.ErrNoParent) {
		t.Fatalf("Multi create without parent: %v, want *MultiError index 0 wrapping ErrNoParent", err)
	}
}

func TestCloseWhilePartitionedIsBoundedAndFiresWatches(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	p := faultproxy.New(t, servers[0])
	s, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{p.Addr()}, SessionTimeout: testSessionTimeout, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.ExistsW(ctx, base+"/never")
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	awaitState(t, s, testSessionTimeout, "suspended", func(c store.Session) bool { return c.State == store.StateSuspended })

	// A call stuck behind the partition with no deadline ends when Close does.
	stuck := make(chan error, 1)
	go func() {
		_, err := s.Create(context.Background(), base+"/stuck", nil, store.Persistent)
		stuck <- err
	}()
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close while partitioned took %v", d)
	}
	select {
	case err := <-stuck:
		if !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrConnectionLoss) {
			t.Fatalf("call pending at Close: %v, want ErrClosed or ErrConnectionLoss", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call pending at Close did not return")
	}
	ev := recvEvent(t, watch, "watch at Close")
	if ev.Type != store.EventNotWatching || !errors.Is(ev.Err, store.ErrClosed) {
		t.Fatalf("watch at Close: %v %v, want not-watching ErrClosed", ev.Type, ev.Err)
	}
	if cur, _ := s.Session(); cur.State != store.StateClosed {
		t.Fatalf("state after Close: %v", cur.State)
	}
	t.Logf("Close while partitioned took %v", time.Since(start))
}

// recvEvent receives one watch event, failing after 10s.
func recvEvent(t *testing.T, ch <-chan store.Event, what string) store.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no event within 10s", what)
		return store.Event{}
	}
}

func TestServerRestartWithinTimeoutResumesTheSameSession(t *testing.T) {
	// tickTime 2s lets the server grant a 30s session, longer than a JVM
	// restart on a loaded machine.
	z := integration.StartZooKeeper(t, integration.WithTickTime(2*time.Second))
	z.RequireControl(t)
	ctx := testCtx(t)
	const timeout = 30 * time.Second
	s := open(t, zkstore.Config{Servers: z.Servers(), SessionTimeout: timeout})
	before, _ := s.Session()
	if before.Timeout != timeout {
		t.Fatalf("negotiated timeout %v, want %v", before.Timeout, timeout)
	}
	eph, err := s.Create(ctx, "/restart-eph", []byte("v"), store.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.GetW(ctx, eph)
	if err != nil {
		t.Fatal(err)
	}

	down := time.Now()
	if err := z.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	awaitState(t, s, timeout, "suspended while ZooKeeper is down", func(c store.Session) bool { return c.State == store.StateSuspended })
	if err := z.Start(ctx); err != nil {
		t.Fatal(err)
	}
	after := awaitState(t, s, timeout, "reconnected after the restart", func(c store.Session) bool { return c.State != store.StateSuspended })
	downtime := time.Since(down)
	if after.State != store.StateConnected || after.ID != before.ID {
		t.Fatalf("after a restart of %v: %v session 0x%x, want connected with the same session 0x%x", downtime, after.State, after.ID, before.ID)
	}
	_, st, err := s.Get(ctx, eph)
	if err != nil || st.EphemeralOwner != before.ID {
		t.Fatalf("ephemeral after the restart: owner 0x%x, %v; want kept by 0x%x", st.EphemeralOwner, err, before.ID)
	}
	if _, err := s.Set(ctx, eph, []byte("w"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if ev := recvEvent(t, watch, "watch armed before the restart"); ev.Type != store.EventNodeDataChanged {
		t.Fatalf("watch after the restart: %v (err %v), want data-changed", ev.Type, ev.Err)
	}
	t.Logf("ZooKeeper down and back in %v; session 0x%x resumed", downtime, after.ID)
}

func TestEnsembleMemberStopFailsOverKeepingTheSession(t *testing.T) {
	// tickTime 1s lets the ensemble grant a 15s session, longer than a
	// leader election on a loaded machine.
	e := integration.StartEnsemble(t, 3, integration.WithTickTime(time.Second))
	e.RequireControl(t)
	ctx := testCtx(t)
	const timeout = 15 * time.Second
	s := open(t, zkstore.Config{Servers: e.Servers(), SessionTimeout: timeout})
	before, _ := s.Session()
	eph, err := s.Create(ctx, "/failover-eph", nil, store.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.GetW(ctx, eph)
	if err != nil {
		t.Fatal(err)
	}
	connectedTo := s.Conn().Server()
	member := -1
	for i := range e.Size() {
		if e.Member(i).Servers()[0] == connectedTo {
			member = i
		}
	}
	if member < 0 {
		t.Fatalf("connected to %s, which is none of %v", connectedTo, e.Servers())
	}
	// Cross-check with the server's side: the member lists our session
	// among its connections, so the stop below really cuts this session.
	cons, err := e.Member(member).FourLetterWord(ctx, "cons")
	if err != nil {
		t.Fatalf("cons on member %d: %v", member, err)
	}
	if sid := fmt.Sprintf("sid=0x%x", before.ID); !strings.Contains(cons, sid) {
		t.Fatalf("member %d (%s) does not list session %s; the client says it is connected there:\n%s", member, connectedTo, sid, cons)
	}

	stopped := time.Now()
	if err := e.StopMember(ctx, member); err != nil {
		t.Fatal(err)
	}
	// StopMember returns once the container has exited, which on a loaded
	// machine can be long after the member closed its connections: the
	// store may have been suspended and failed over already. So wait for
	// the outcome (connected to another member, or lost), not for the
	// transient suspension, which may be over before we look.
	after := awaitState(t, s, 2*timeout, "failed over to another member", func(c store.Session) bool {
		return c.State == store.StateLost || c.State == store.StateClosed ||
			(c.State == store.StateConnected && s.Conn().Server() != connectedTo)
	})
	failover := time.Since(stopped)
	if after.State != store.StateConnected || after.ID != before.ID {
		t.Fatalf("after stopping member %d: %v session 0x%x, want connected with the same session 0x%x", member, after.State, after.ID, before.ID)
	}
	if now := s.Conn().Server(); now == connectedTo {
		t.Fatalf("still connected to the stopped member %s", now)
	}
	if _, err := s.Set(ctx, eph, []byte("x"), store.AnyVersion); err != nil {
		t.Fatalf("Set after failover: %v", err)
	}
	if ev := recvEvent(t, watch, "watch armed before the failover"); ev.Type != store.EventNodeDataChanged {
		t.Fatalf("watch after failover: %v (err %v), want data-changed", ev.Type, ev.Err)
	}
	t.Logf("member %d (%s) stopped; session 0x%x resumed on %s after %v", member, connectedTo, after.ID, s.Conn().Server(), failover)
}

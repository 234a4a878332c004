package coordtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// Begin plans its first attempt on the job's tree cache (the flag
// directory, the server's sharding node, the failover directory: no
// reads), and its transaction's version checks are what keep a cache
// behind the store from starting a run on a stale state. These tests hold
// one server's cache behind the store on one of the three nodes (the
// watch has fired; its re-read is held) and check that the Begin's first
// transaction is refused (a version conflict) and the Begin plans again
// on direct reads. Each fails if that node's version check is taken out of
// the transaction (run.go, fences).

// laggingServer is a server whose tree cache can be held behind the store
// on one node: once hold is set, its watcher's re-read of path (method
// GetW or ChildrenW) waits until release is closed, and held is signalled.
type laggingServer struct {
	*Server
	hs      *HookStore
	method  string
	path    string
	held    chan struct{}
	release chan struct{}

	mu      sync.Mutex
	holding bool
	direct  int // direct reads of path (Get, Children) since counting began
	refused int // transactions refused with a version conflict
}

// startLagging starts server id on a hooked session of its own (see
// laggingServer).
func startLagging(t *testing.T, h *Harness, id string, cfg jobconfig.Config, method, path string) *laggingServer {
	t.Helper()
	l := &laggingServer{method: method, path: path, held: make(chan struct{}, 1), release: make(chan struct{})}
	direct := map[string]string{"GetW": "Get", "ChildrenW": "Children"}[method]
	l.hs = &HookStore{Store: h.B.Connect(t),
		Before: func(ctx context.Context, c Call) error {
			if c.Path != path {
				return nil
			}
			l.mu.Lock()
			holding := l.holding && c.Method == method
			if c.Method == direct {
				l.direct++
			}
			l.mu.Unlock()
			if holding {
				select {
				case l.held <- struct{}{}:
				default:
				}
				select {
				case <-l.release:
				case <-ctx.Done():
				}
			}
			return nil
		},
		After: func(_ context.Context, c Call, err error) error {
			if c.Method == "Multi" && errors.Is(err, store.ErrBadVersion) {
				l.mu.Lock()
				l.refused++
				l.mu.Unlock()
			}
			return err
		}}
	s, err := h.TryStart(id, cfg, l.hs)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	l.Server = s
	t.Cleanup(l.unhold)
	return l
}

// counts returns the direct reads of the held path and the refused
// transactions so far, and resets them.
func (l *laggingServer) counts() (direct, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	direct, refused = l.direct, l.refused
	l.direct, l.refused = 0, 0
	return direct, refused
}

// hold holds the watcher's next re-reads of the path.
func (l *laggingServer) hold() {
	l.mu.Lock()
	l.holding = true
	l.mu.Unlock()
}

// unhold lets the held re-read go (idempotent).
func (l *laggingServer) unhold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holding {
		l.holding = false
		close(l.release)
	}
}

// awaitHeld waits until the watcher's re-read of the path is held: the
// watch fired, and the cache still has what it read before.
func (l *laggingServer) awaitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-l.held:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the watch on %s did not fire within 30 s of the write", l.ID, l.path)
	}
}

// warm runs triggers on servers until one of l's Begins reads the held
// path from its cache (no direct read of it): the cache has loaded it. It
// returns that run's items.
func warm(t *testing.T, l *laggingServer, servers ...*Server) []protocol.Assignment {
	t.Helper()
	for range 20 {
		runs := BeginAll(t, servers...)
		CompleteAll(t, runs...)
		l.counts()
		run := beginOne(t, l.Server)
		CompleteAll(t, run)
		if direct, _ := l.counts(); direct == 0 {
			return run.Shards()
		}
	}
	t.Fatalf("%s: every Begin of 20 read %s directly: the tree cache never had it", l.ID, l.path)
	return nil
}

// testBeginOnLaggingAssignment: b's cache still has its item when the
// store has moved it to a: b's Begin must not run it.
func testBeginOnLaggingAssignment(t *testing.T, h *Harness) {
	cfg := Config("job", 2)
	a := h.Start("a", cfg)
	servers := "/" + h.NS + "/job/servers/"
	b := startLagging(t, h, "b", cfg, "GetW", servers+"b/sharding")
	warm(t, b, a, b.Server)
	b.hold()
	// The store moves both items to a (as a reshard would); b's watch
	// fires, its re-read is held.
	if _, err := h.AdminStore.Multi(testCtx(t),
		&store.SetOp{Path: servers + "a/sharding", Data: []byte("0,1"), Version: store.AnyVersion},
		&store.SetOp{Path: servers + "b/sharding", Data: []byte(""), Version: store.AnyVersion}); err != nil {
		t.Fatal(err)
	}
	b.awaitHeld(t)
	run := beginOne(t, b.Server)
	defer CompleteAll(t, run)
	if len(run.Shards()) > 0 {
		t.Fatalf("b's Begin ran %+v on its cache's assignment; the store gives b no item", run.Shards())
	}
	if _, refused := b.counts(); refused == 0 {
		t.Fatal("b's Begin was not refused a transaction: its cache did not lag (the test did not test it)")
	}
}

// testBeginOnLaggingFlag: a's cache has not seen the resharding flag
// raised: a's Begin must reshard (a leads) before it runs, not run on the
// assignment the flag replaces.
func testBeginOnLaggingFlag(t *testing.T, h *Harness) {
	cfg := Config("job", 2)
	dir := "/" + h.NS + "/job/leader/sharding"
	a := startLagging(t, h, "a", cfg, "ChildrenW", dir)
	warm(t, a)
	a.hold()
	ctx := testCtx(t)
	// layout.RaiseFlagOps: the flag and the bump of its directory.
	if _, err := h.AdminStore.Multi(ctx, &store.CreateOp{Path: dir + "/necessary"},
		&store.SetOp{Path: dir, Version: store.AnyVersion}); err != nil {
		t.Fatal(err)
	}
	_, flag, err := h.AdminStore.Exists(ctx, dir+"/necessary")
	if err != nil {
		t.Fatal(err)
	}
	a.awaitHeld(t)
	run := beginOne(t, a.Server)
	defer CompleteAll(t, run)
	if len(run.Shards()) != 2 {
		t.Fatalf("a's Begin ran %+v, want both items", run.Shards())
	}
	for _, s := range run.Shards() {
		if s.Epoch <= flag.Czxid {
			t.Fatalf("a's Begin ran item %d at epoch %d, from before the resharding flag (zxid %d): its cache had not seen the flag", s.Item, s.Epoch, flag.Czxid)
		}
	}
	if up, _, err := h.AdminStore.Exists(ctx, dir+"/necessary"); err != nil || up {
		t.Fatalf("the resharding flag is still up after the leader's Begin (err %v)", err)
	}
	if _, refused := a.counts(); refused == 0 {
		t.Fatal("a's Begin was not refused a transaction: its cache did not lag (the test did not test it)")
	}
}

// testBeginOnLaggingFailoverQueue: b's item is queued for failover (a
// crashed run's token) after b's cache listed the failover directory: b's
// Begin must consume the entry (its run re-runs the item), or a failover
// claim of the entry would run the item beside b's run.
func testBeginOnLaggingFailoverQueue(t *testing.T, h *Harness) {
	cfg := Config("job", 2, func(c *jobconfig.Config) { c.Failover = true })
	a := h.Start("a", cfg)
	dir := "/" + h.NS + "/job/leader/failover/items"
	b := startLagging(t, h, "b", cfg, "ChildrenW", dir)
	last := warm(t, b, a, b.Server)
	if len(last) != 1 {
		t.Fatalf("b ran %+v, want one item", last)
	}
	mine := last[0].Item
	b.hold()
	ctx := testCtx(t)
	entry := dir + "/" + strconv.Itoa(mine)
	if _, err := h.AdminStore.Multi(ctx, &store.CreateOp{Path: entry},
		&store.SetOp{Path: dir, Version: store.AnyVersion}); err != nil {
		t.Fatal(err)
	}
	b.awaitHeld(t)
	run := beginOne(t, b.Server)
	defer CompleteAll(t, run)
	if len(run.Shards()) != 1 || run.Shards()[0].Item != mine {
		t.Fatalf("b's Begin ran %+v, want its item %d", run.Shards(), mine)
	}
	if queued, _, err := h.AdminStore.Exists(ctx, entry); err != nil || queued {
		t.Fatalf("b's Begin ran item %d and left its failover queue entry %s (err %v): a claim of it would run the item beside b's run", mine, entry, err)
	}
	if _, refused := b.counts(); refused == 0 {
		t.Fatal("b's Begin was not refused a transaction: its cache did not lag (the test did not test it)")
	}
}

// beginOne begins a run on s.
func beginOne(t *testing.T, s *Server) *protocol.Run {
	t.Helper()
	r, err := s.Job.Begin(testCtx(t), time.Now())
	if err != nil {
		t.Fatalf("Begin on %s: %v", s.ID, err)
	}
	return r
}

package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
)

// gate is the wrapped store of the tests: it records every Multi it is
// sent and holds the first one until release is closed, so that a test
// queues requests behind a batch in flight.
type gate struct {
	store.Store
	release chan struct{}
	// limit, when > 0, is the request limit it states (MaxRequestBytes).
	limit int

	mu    sync.Mutex
	held  bool
	calls [][]store.Op
}

func (g *gate) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	g.mu.Lock()
	g.calls = append(g.calls, ops)
	hold := !g.held && g.release != nil
	g.held = true
	g.mu.Unlock()
	if hold {
		<-g.release
	}
	return g.Store.Multi(ctx, ops...)
}

func (g *gate) MaxRequestBytes() int {
	if g.limit > 0 {
		return g.limit
	}
	return store.RequestLimit(g.Store)
}

// sent returns the number of operations of each Multi the gate was sent.
func (g *gate) sent() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n []int
	for _, c := range g.calls {
		n = append(n, len(c))
	}
	return n
}

// outcome is one request's result.
type outcome struct {
	res []store.OpResult
	err error
}

// fixture is a memstore session with jobs a..z's roots created, wrapped by
// a gate and the group committer, one batch in flight at a time (so that
// requests queue behind the gate's).
// stated, when > 0, is the request limit the gate states.
func fixture(t *testing.T, stated int, opts ...memstore.Option) (*memstore.Session, *gate, *groupcommit.Store) {
	srv := memstore.NewServer(opts...)
	sess := srv.Connect()
	ctx := context.Background()
	if _, err := sess.Create(ctx, "/ns", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	for c := 'a'; c <= 'z'; c++ {
		if _, err := sess.Create(ctx, "/ns/"+string(c), nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	g := &gate{Store: sess, release: make(chan struct{}), limit: stated}
	gc := groupcommit.New(g, groupcommit.WithMaxInFlight(1))
	t.Cleanup(func() { _ = gc.Close() })
	return sess, g, gc
}

// queueBehindBlocker sends a blocker (a create under /ns/z) and waits
// until the gate holds it, then sends reqs, each on its own goroutine, in
// order, and waits until each is queued; release lets them all through.
// results[len(reqs)] is the blocker's.
func queueBehindBlocker(t *testing.T, g *gate, gc *groupcommit.Store, reqs [][]store.Op) (results []outcome, release func()) {
	results = make([]outcome, len(reqs)+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := gc.Multi(context.Background(), &store.CreateOp{Path: "/ns/z/blocker"})
		results[len(reqs)] = outcome{res, err}
	}()
	synctest.Wait()
	for i, ops := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := gc.Multi(context.Background(), ops...)
			results[i] = outcome{res, err}
		}()
		synctest.Wait() // queued in this order
	}
	return results, func() {
		close(g.release)
		wg.Wait()
	}
}

// TestBatchMixesConflictingAndNot: requests on different jobs share one
// combined Multi; two on the same job never do, and keep their order; a
// refused request gets its own error (the index within its own ops) and
// the others commit, in one retry.
func TestBatchMixesConflictingAndNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess, g, gc := fixture(t, 0)
		ctx := context.Background()
		if _, err := sess.Create(ctx, "/ns/b/flag", nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
		reqs := [][]store.Op{
			{&store.CreateOp{Path: "/ns/a/x"}, &store.SetOp{Path: "/ns/a", Data: []byte("1"), Version: store.AnyVersion}},
			// Refused: the flag's version is 0, not 7.
			{&store.CreateOp{Path: "/ns/b/x"}, &store.CheckOp{Path: "/ns/b/flag", Version: 7}},
			{&store.CreateOp{Path: "/ns/c/x"}},
			// The same job as the first: the next batch, after it.
			{&store.CheckOp{Path: "/ns/a/x", Version: 0}, &store.SetOp{Path: "/ns/a", Data: []byte("2"), Version: 1}},
			{&store.CreateOp{Path: "/ns/d/x"}},
		}
		results, release := queueBehindBlocker(t, g, gc, reqs)
		release()
		var me *store.MultiError
		if err := results[1].err; !errors.As(err, &me) || me.Index != 1 || !errors.Is(err, store.ErrBadVersion) {
			t.Fatalf("refused request: %v, want a MultiError at its own index 1 wrapping ErrBadVersion", err)
		}
		for _, i := range []int{0, 2, 3, 4} {
			if results[i].err != nil || len(results[i].res) != len(reqs[i]) {
				t.Fatalf("request %d: %v (%d results), want committed", i, results[i].err, len(results[i].res))
			}
		}
		if got := results[0].res[0].Path; got != "/ns/a/x" {
			t.Fatalf("request 0's create returned %q", got)
		}
		if ok, _, _ := sess.Exists(ctx, "/ns/b/x"); ok {
			t.Fatal("the refused request's create was applied")
		}
		data, st, _ := sess.Get(ctx, "/ns/a")
		if string(data) != "2" || st.Version != 2 {
			t.Fatalf("/ns/a = %q version %d, want the second request after the first", data, st.Version)
		}
		// Blocker; a, b, c, d (refused at b); a, c, d again; a's second.
		if got, want := fmt.Sprint(g.sent()), "[1 6 4 2]"; got != want {
			t.Fatalf("Multis sent (ops each): %s, want %s", got, want)
		}
		// The two writes of /ns/a: distinct transactions, in order.
		first, second := results[0].res[1].Stat.Mzxid, results[3].res[1].Stat.Mzxid
		if first >= second {
			t.Fatalf("job a's writes at zxids %d then %d: want increasing", first, second)
		}
		if s := gc.Stats(); s.Requests != 6 || s.Retries != 1 || s.Alone != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestSecondRefusalSendsTheRestAlone: after two refusals in one batch, the
// requests left go on Multis of their own: no request waits for more than
// one retry of a combined Multi.
func TestSecondRefusalSendsTheRestAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess, g, gc := fixture(t, 0)
		reqs := [][]store.Op{
			{&store.CreateOp{Path: "/ns/a/x"}},
			{&store.CheckOp{Path: "/ns/b/none", Version: 0}}, // refused: no node
			{&store.CreateOp{Path: "/ns/c/x"}},
			{&store.DeleteOp{Path: "/ns/d/none", Version: store.AnyVersion}}, // refused
			{&store.CreateOp{Path: "/ns/e/x"}},
		}
		results, release := queueBehindBlocker(t, g, gc, reqs)
		release()
		for i, want := range []error{nil, store.ErrNoNode, nil, store.ErrNoNode, nil} {
			if !errors.Is(results[i].err, want) {
				t.Fatalf("request %d: %v, want %v", i, results[i].err, want)
			}
		}
		for _, p := range []string{"/ns/a/x", "/ns/c/x", "/ns/e/x"} {
			if ok, _, _ := sess.Exists(context.Background(), p); !ok {
				t.Fatalf("%s not created", p)
			}
		}
		// Blocker; all five; a, c, d, e; then a, c, e alone.
		if got, want := fmt.Sprint(g.sent()), "[1 5 4 1 1 1]"; got != want {
			t.Fatalf("Multis sent (ops each): %s, want %s", got, want)
		}
	})
}

// TestSessionLostMidBatch: a connection lost while a combined Multi is in
// flight fails every request of it with the store's error (the outcome
// unknown, as of a plain Multi), and nothing is applied.
func TestSessionLostMidBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess, g, gc := fixture(t, 0)
		var reqs [][]store.Op
		for _, j := range []string{"a", "b", "c"} {
			reqs = append(reqs, []store.Op{&store.CreateOp{Path: "/ns/" + j + "/x", Mode: store.Ephemeral}})
		}
		results, release := queueBehindBlocker(t, g, gc, reqs)
		sess.Disconnect()
		release()
		for i, r := range results {
			if !errors.Is(r.err, store.ErrConnectionLoss) {
				t.Fatalf("request %d: %v, want ErrConnectionLoss", i, r.err)
			}
		}
		sess.Reconnect()
		for _, j := range []string{"a", "b", "c"} {
			if ok, _, _ := sess.Exists(context.Background(), "/ns/"+j+"/x"); ok {
				t.Fatalf("/ns/%s/x was created by a batch that failed", j)
			}
		}
		if got, want := fmt.Sprint(g.sent()), "[1 3]"; got != want {
			t.Fatalf("Multis sent (ops each): %s, want %s", got, want)
		}
	})
}

// TestTooLargeTogetherAreSplit: requests that fit the store's limit alone
// but not together go in batches within it; when the store measures a
// batch larger than its stated limit (store.ErrTooLarge), the batch is
// split in halves and every request still commits.
func TestTooLargeTogetherAreSplit(t *testing.T) {
	const limit = 4 << 10
	payload := make([]byte, limit*2/5) // two fit in the limit, three do not
	for _, tc := range []struct {
		name   string
		stated int // the limit the gate states; above the real one: the store refuses
		want   string
	}{
		{"within the stated limit", limit, "[1 2 2 1]"},
		{"the store refuses a batch", 4 * limit, "[1 5 2 3 1 2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sess, g, gc := fixture(t, tc.stated, memstore.WithMaxRequestBytes(limit))
				var reqs [][]store.Op
				for _, j := range []string{"a", "b", "c", "d", "e"} {
					reqs = append(reqs, []store.Op{&store.CreateOp{Path: "/ns/" + j + "/x", Data: payload}})
				}
				results, release := queueBehindBlocker(t, g, gc, reqs)
				release()
				for i, r := range results {
					if r.err != nil {
						t.Fatalf("request %d: %v", i, r.err)
					}
				}
				for _, j := range []string{"a", "b", "c", "d", "e"} {
					if ok, _, _ := sess.Exists(context.Background(), "/ns/"+j+"/x"); !ok {
						t.Fatalf("/ns/%s/x not created", j)
					}
				}
				if got := fmt.Sprint(g.sent()); got != tc.want {
					t.Fatalf("Multis sent (ops each): %s, want %s", got, tc.want)
				}
			})
		})
	}
}

// TestAboveTheKeysGoesAlone: a request creating a job's root, or touching
// a node above the jobs, shares no batch, and nothing queued after it
// passes it.
func TestAboveTheKeysGoesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, g, gc := fixture(t, 0)
		reqs := [][]store.Op{
			{&store.CreateOp{Path: "/ns/a/x"}},
			{&store.CreateOp{Path: "/ns/new"}},
			{&store.CreateOp{Path: "/ns/b/x"}},
			{&store.SetOp{Path: "/ns", Data: []byte("v"), Version: store.AnyVersion}},
			{&store.CreateOp{Path: "/ns/c/x"}},
		}
		results, release := queueBehindBlocker(t, g, gc, reqs)
		release()
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("request %d: %v", i, r.err)
			}
		}
		if got, want := fmt.Sprint(g.sent()), "[1 1 1 1 1 1]"; got != want {
			t.Fatalf("Multis sent (ops each): %s, want %s", got, want)
		}
	})
}

// TestSecondBatchInFlight: with two batches in flight (the default), a
// request of another job goes while the first batch is held, and one of
// the held batch's job waits for it.
func TestSecondBatchInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess := memstore.NewServer().Connect()
		ctx := context.Background()
		for _, p := range []string{"/ns", "/ns/a", "/ns/z"} {
			if _, err := sess.Create(ctx, p, nil, store.Persistent); err != nil {
				t.Fatal(err)
			}
		}
		g := &gate{Store: sess, release: make(chan struct{})}
		gc := groupcommit.New(g)
		defer gc.Close()
		done := make(chan string, 3)
		multi := func(p string) {
			if _, err := gc.Multi(ctx, &store.CreateOp{Path: p}); err != nil {
				t.Errorf("%s: %v", p, err)
			}
			done <- p
		}
		go multi("/ns/z/blocker")
		synctest.Wait()
		go multi("/ns/z/x") // z is held by the batch in flight
		synctest.Wait()
		go multi("/ns/a/x")
		synctest.Wait()
		if got := <-done; got != "/ns/a/x" {
			t.Fatalf("%s done first, want /ns/a/x", got)
		}
		select {
		case p := <-done:
			t.Fatalf("%s done while the gate holds the first batch", p)
		default:
		}
		close(g.release)
		<-done
		<-done
		_, first, _ := sess.Exists(ctx, "/ns/z/blocker")
		_, second, _ := sess.Exists(ctx, "/ns/z/x")
		if first.Czxid >= second.Czxid {
			t.Fatalf("the blocker created at zxid %d, /ns/z/x at %d: want the blocker first", first.Czxid, second.Czxid)
		}
		if got, want := fmt.Sprint(g.sent()), "[1 1 1]"; got != want {
			t.Fatalf("Multis sent (ops each): %s, want %s", got, want)
		}
	})
}

// TestQueuedCallerGivesUp: a request whose ctx ends while it is queued
// returns the ctx's error and is never committed.
func TestQueuedCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess, g, gc := fixture(t, 0)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = gc.Multi(context.Background(), &store.CreateOp{Path: "/ns/z/blocker"})
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := gc.Multi(ctx, &store.CreateOp{Path: "/ns/a/x"})
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("queued request: %v, want context.Canceled", err)
		}
		close(g.release)
		wg.Wait()
		if ok, _, _ := sess.Exists(context.Background(), "/ns/a/x"); ok {
			t.Fatal("a request whose caller gave up while queued was committed")
		}
	})
}

// TestConcurrentFencedWrites: many goroutines on few jobs each do
// version-checked increments of their job's counter and unconditional
// writes of its touch node; every increment is applied exactly once, its
// zxids grow with its versions, and no two writes of one job share a zxid
// (two requests of one job in one combined Multi would). Randomized: the
// seed is printed.
func TestConcurrentFencedWrites(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	const jobs, workers, incs = 5, 20, 30
	sess, g, gc := fixture(t, 0)
	g.release = nil
	ctx := context.Background()
	for j := range jobs {
		for _, n := range []string{"n", "nt"} {
			if _, err := sess.Create(ctx, fmt.Sprintf("/ns/%c/%s", 'a'+j, n), []byte("0"), store.Persistent); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	zxids := make([]map[int32]int64, jobs) // per job: version -> Mzxid
	touched := map[int64]int{}             // a touch's Mzxid -> its job
	for j := range zxids {
		zxids[j] = map[int32]int64{}
	}
	var wg sync.WaitGroup
	for w := range workers {
		job := rng.IntN(jobs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("/ns/%c/n", 'a'+job)
			touches := 0
			for done := 0; done < incs; {
				res, err := gc.Multi(ctx, &store.SetOp{Path: p + "t", Version: store.AnyVersion},
					&store.CreateOp{Path: fmt.Sprintf("/ns/%c/t%d-%d", 'a'+job, w, touches)})
				touches++
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if other, dup := touched[res[0].Stat.Mzxid]; dup && other == job {
					t.Errorf("job %c: two writes at zxid %d", 'a'+job, res[0].Stat.Mzxid)
				}
				touched[res[0].Stat.Mzxid] = job
				mu.Unlock()
				data, st, err := gc.Get(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(string(data))
				res, err = gc.Multi(ctx, &store.SetOp{Path: p, Data: []byte(strconv.Itoa(n + 1)), Version: st.Version},
					&store.CreateOp{Path: fmt.Sprintf("/ns/%c/w%d-%d", 'a'+job, w, done)})
				if errors.Is(err, store.ErrBadVersion) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				done++
				mu.Lock()
				zxids[job][res[0].Stat.Version] = res[0].Stat.Mzxid
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for j := range jobs {
		data, st, err := sess.Get(ctx, fmt.Sprintf("/ns/%c/n", 'a'+j))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(data))
		if int(st.Version) != n {
			t.Fatalf("job %c: counter %d after %d versions: a lost or doubled increment", 'a'+j, n, st.Version)
		}
		for v := int32(2); v <= st.Version; v++ {
			if zxids[j][v] <= zxids[j][v-1] {
				t.Fatalf("job %c: version %d at zxid %d, version %d at zxid %d: want increasing", 'a'+j, v-1, zxids[j][v-1], v, zxids[j][v])
			}
		}
		total += n
	}
	if total != workers*incs {
		t.Fatalf("%d increments, want %d", total, workers*incs)
	}
	t.Logf("stats %+v", gc.Stats())
}

// TestCloseBesideMultis: Multis made while and after the store closes
// return (committed, or the store's ErrClosed) and start no flusher after
// Close has waited for them.
func TestCloseBesideMultis(t *testing.T) {
	sess := memstore.NewServer().Connect(memstore.WithGroupCommit())
	ctx := context.Background()
	if _, err := sess.Create(ctx, "/ns", nil, store.Persistent); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				_, err := sess.Multi(ctx, &store.CreateOp{Path: fmt.Sprintf("/ns/j%d-%d", i, k)})
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := sess.Multi(ctx, &store.CreateOp{Path: "/ns/after"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Multi after Close: %v, want ErrClosed", err)
	}
}

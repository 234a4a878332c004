package zkstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/internal/faultproxy"
)

// groupWrite is one concurrent Multi of TestGroupCommitOnZooKeeper: a
// create under its job, refused when check names a missing node.
type groupWrite struct {
	job, path string
	refused   bool
	err       error
	zxid      int64
}

// runGroupWrites makes n Multis at once, on jobs base/j0..j9, every fifth
// one refused by a check of a missing node, and returns them when all are
// back.
func runGroupWrites(ctx context.Context, s store.Store, base, tag string, n int) []*groupWrite {
	ws := make([]*groupWrite, n)
	var wg sync.WaitGroup
	for i := range ws {
		job := fmt.Sprintf("%s/j%d", base, i%10)
		w := &groupWrite{job: job, path: fmt.Sprintf("%s/%s%d", job, tag, i), refused: i%5 == 4}
		ws[i] = w
		ops := []store.Op{&store.CreateOp{Path: w.path}, &store.SetOp{Path: job, Version: store.AnyVersion}}
		if w.refused {
			ops = append(ops, &store.CheckOp{Path: job + "/missing", Version: store.AnyVersion})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Multi(ctx, ops...)
			w.err = err
			if err == nil {
				w.zxid = res[1].Stat.Mzxid
			}
		}()
	}
	wg.Wait()
	return ws
}

// TestGroupCommitOnZooKeeper: concurrent Multis of several jobs on one
// session (the group committer's combined requests): every write reported
// committed is there, every refused one (its own MultiError, at the index
// of its own check) is not, and no two writes of one job share a zxid.
// Then the same with the connection cut as they are sent (some in flight,
// some queued, some after it; the session may be lost): each
// caller returns; a write reported committed is there, a refused one is
// not (a connection error leaves the outcome unknown, as for any multi).
func TestGroupCommitOnZooKeeper(t *testing.T) {
	servers := zkServers(t)
	admin := open(t, zkstore.Config{})
	base := freshBase(t, admin)
	ctx := testCtx(t)
	for i := range 10 {
		if _, err := admin.Create(ctx, fmt.Sprintf("%s/j%d", base, i), nil, store.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	check := func(ws []*groupWrite, cut bool) {
		t.Helper()
		seen := map[int64]string{}
		for _, w := range ws {
			ok, _, err := admin.Exists(ctx, w.path)
			if err != nil {
				t.Fatal(err)
			}
			var me *store.MultiError
			switch {
			case w.err == nil && !w.refused:
				if !ok {
					t.Errorf("%s: committed, not stored", w.path)
				}
				if other, dup := seen[w.zxid]; dup && other == w.job {
					t.Errorf("%s: two writes of %s at zxid 0x%x", w.path, w.job, w.zxid)
				}
				seen[w.zxid] = w.job
			case w.refused && errors.As(w.err, &me):
				if me.Index != 2 || !errors.Is(w.err, store.ErrNoNode) || ok {
					t.Errorf("%s: refused at index %d (%v), stored %v; want index 2, ErrNoNode, not stored", w.path, me.Index, w.err, ok)
				}
			case cut && w.err != nil && !errors.As(w.err, &me):
				// A connection error: the outcome is unknown.
			default:
				t.Errorf("%s (refused %v): %v, stored %v", w.path, w.refused, w.err, ok)
			}
		}
	}

	s := open(t, zkstore.Config{})
	check(runGroupWrites(ctx, s, base, "a", 200), false)
	st := zkstore.GroupCommitStats(s)
	t.Logf("200 Multis: %+v", st)
	if st.Requests != 200 || st.Batches > st.Requests+st.Retries {
		t.Fatalf("stats %+v after 200 Multis", st)
	}

	p := faultproxy.New(t, servers[0])
	cs := open(t, zkstore.Config{Servers: []string{p.Addr()}})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.Cut()
	}()
	cctx, cancel := context.WithTimeout(ctx, 2*testSessionTimeout)
	defer cancel()
	ws := runGroupWrites(cctx, cs, base, "b", 200)
	wg.Wait()
	p.Restore()
	check(ws, true)
}

package protocol_test

import (
	"context"
	"path"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
)

// countNodeReads counts the reads of count nodes (layout.CountNodes) made
// through it, per server.
type countNodeReads struct {
	*storecount.Store
	mu sync.Mutex
	n  map[string]int64
}

func newCountNodeReads(st store.Store) *countNodeReads {
	return &countNodeReads{Store: storecount.New(st), n: map[string]int64{}}
}

func (s *countNodeReads) Get(ctx context.Context, p string) ([]byte, store.Stat, error) {
	if slices.Contains(layout.CountNodes, path.Base(p)) {
		s.mu.Lock()
		s.n[path.Base(path.Dir(p))]++
		s.mu.Unlock()
	}
	return s.Store.Get(ctx, p)
}

// of is the count nodes of server id read so far.
func (s *countNodeReads) of(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

// TestUnwrittenCountsCost: a server's count nodes, created at 0 with its
// node (df5f163, so that its first trigger reads nothing), are read only
// once a report wrote them. Before, a restarted server's join read its 2
// totals and a status read all 4 count nodes of every server, though no
// report ever wrote them (make bench-jobs, 1,000 idle jobs restarted: 17
// -> 19 requests per job against 3e45a3f, which created them at the first
// report; make bench-scale's status read 55 -> 67 requests on 3 servers).
// The registration marks the server node (its data set in the
// transaction that creates it: layout.CountsUnwritten) and the first
// report ends the mark. Written counts are read and continued across a
// restart as before; counts written by a writer that leaves the mark
// standing (an older release, after a downgrade) fail the join's check of
// the totals it took as 0, and it reads them.
func TestUnwrittenCountsCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := coordtest.NewHarness(t, coordtest.Mem())
		cfg := coordtest.Config("job", 2)
		start := func(id string) (*coordtest.Server, *countNodeReads) {
			t.Helper()
			st := newCountNodeReads(h.B.Connect(t))
			srv, err := h.TryStart(id, cfg, st)
			if err != nil {
				t.Fatal(err)
			}
			settle()
			return srv, st
		}
		stop := func(srv *coordtest.Server) {
			t.Helper()
			srv.Stop(t)
			settle()
		}
		status := func(id string) (coord.ServerStatus, int64) {
			t.Helper()
			st := newCountNodeReads(h.B.Connect(t))
			js, err := coord.NewAdmin(st, h.NS).Status(t.Context(), "job")
			if err != nil {
				t.Fatal(err)
			}
			for _, ss := range js.Servers {
				if ss.ID == id {
					return ss, st.of(id)
				}
			}
			t.Fatalf("status: no server %q in %+v", id, js.Servers)
			return coord.ServerStatus{}, 0
		}
		check := func(when, id string, ss coord.ServerStatus, reads, wantReads, s, f, ts, tf int64, asOf bool) {
			t.Helper()
			if reads != wantReads {
				t.Errorf("%s: status read %s's count nodes %d times, want %d", when, id, reads, wantReads)
			}
			if ss.ProcessSuccessCount != s || ss.ProcessFailureCount != f || ss.TotalSuccessCount != ts || ss.TotalFailureCount != tf || (ss.CountsAsOf != nil) != asOf {
				t.Errorf("%s: %s's counts %d/%d totals %d/%d as of %v, want %d/%d and %d/%d (as of a report: %t)", when, id,
					ss.ProcessSuccessCount, ss.ProcessFailureCount, ss.TotalSuccessCount, ss.TotalFailureCount, ss.CountsAsOf, s, f, ts, tf, asOf)
			}
		}
		report := func(srv *coordtest.Server, s, f int64) {
			t.Helper()
			if err := srv.Job.ReportCounts(t.Context(), s, f); err != nil {
				t.Fatal(err)
			}
		}

		// Never counted: nothing to read, at the restart nor in status.
		a, _ := start("a")
		stop(a)
		a, reads := start("a")
		if n := reads.of("a"); n != 0 {
			t.Errorf("the join of a restarted server that never counted read its count nodes %d times, want 0", n)
		}
		ss, n := status("a")
		check("never counted", "a", ss, n, 0, 0, 0, 0, 0, false)

		// Counted: read, and continued across a restart.
		report(a, 5, 1)
		ss, n = status("a")
		check("after a report", "a", ss, n, 4, 5, 1, 5, 1, true)
		stop(a)
		a, reads = start("a")
		if n := reads.of("a"); n != 2 {
			t.Errorf("the join of a restarted server that counted read its count nodes %d times, want 2 (its totals)", n)
		}
		report(a, 2, 0)
		ss, n = status("a")
		check("after a restart and a report", "a", ss, n, 4, 2, 0, 7, 1, true)

		// Counts written as an older release writes them, the mark left
		// standing: the join's check of the totals fails, it reads them
		// and ends the mark.
		b, _ := start("b")
		stop(b)
		p := layout.NewJobPaths(h.NS, "job")
		for _, node := range []string{layout.NSuccess, layout.NSuccessTotal} {
			if _, err := h.AdminStore.Set(t.Context(), p.Server("b", node), []byte("9"), store.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
		b, _ = start("b")
		ss, n = status("b")
		check("counted by an older release", "b", ss, n, 4, 9, 0, 9, 0, true)
		report(b, 1, 0)
		ss, n = status("b")
		check("counted by an older release, then by this one", "b", ss, n, 4, 1, 0, 10, 0, true)
		stop(a)
		stop(b)
	})
}

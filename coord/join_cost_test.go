package coord_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
)

// TestJoinCost bounds what joining an idle job costs one server (issue 15
// item 1: 10,000 jobs in a process): the requests of Join for a new job and
// for a stored one (a restarted process), and the watches the job holds
// once at rest. The figures on memstore: a new job 15 requests, a stored
// one 19, 11 watches (docs/benchmarks.md); the bounds leave a little room,
// far below the 115 and 85 requests and 37 watches of before.
func TestJoinCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		join := func(what string, maxRequests int64) {
			t.Helper()
			st := coord.NewCountingStore(srv.Connect())
			defer func() { _ = st.Close() }()
			reg, err := coord.NewRegistry(st, coord.RegistryConfig{Namespace: "ns", ServerID: "s1", HostName: "h", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			w0 := srv.Stats().Watches
			if _, err := reg.Join(t.Context(), coordtest.Config("job", 4)); err != nil {
				t.Fatal(err)
			}
			if n := st.Counts().Requests(); n > maxRequests {
				t.Errorf("%s: Join made %d requests, want at most %d", what, n, maxRequests)
			}
			// At rest: the leader's reshard and the watches it fires are done.
			synctest.Wait()
			if w := srv.Stats().Watches - w0; w > 11 {
				t.Errorf("%s: the idle job holds %d watches, want at most 11", what, w)
			}
			if err := reg.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		join("a new job", 16)
		join("a stored job", 20)
	})
}

package zkstore_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/store/groupcommit"
	"github.com/shardflow/shardflow/coord/zkstore"
)

// BenchmarkGroupCommitBurst is what ZooKeeper sees when thousands of jobs
// fire in the same instant on a few servers (make bench-fires, 10,000 jobs
// together, monitored): each of 3 sessions sends, at once, one Multi per
// job of the shape of a monitored Begin (a version check and five writes
// of 150 bytes under the job's node), through the group committer with
// the batch bound and the batches in flight of the sub-benchmark's name.
// An iteration is one burst; it reports the burst's wall time (burst-s),
// the Multis committed per second, a request's latency p50/p99 (ms) and
// the combined Multis sent per burst. At load 40-69 (2 cores): 2,001,
// 1,940 and 690 Multis/s for 64/4, 256/4 and 1024/2: larger batches do not
// raise the rate, and 30,000 monitored Begins at one tick are 15 s of it.
//
//	go test -run '^$' -bench BenchmarkGroupCommitBurst -benchtime 2x ./coord/zkstore
func BenchmarkGroupCommitBurst(b *testing.B) {
	const jobs, sessions = 1000, 3
	ctx := context.Background()
	base := "/zkburst"
	setup, err := zkstore.Open(ctx, zkstore.Config{Servers: zkServers(b), Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = setup.Close() }()
	_ = store.DeleteAll(ctx, setup, base)
	defer func() { _ = store.DeleteAll(context.Background(), setup, base) }()
	if err := store.CreateAll(ctx, setup, base); err != nil {
		b.Fatal(err)
	}
	// Every job's nodes, 8 jobs a Multi.
	var create []store.Op
	for j := range jobs {
		create = append(create, &store.CreateOp{Path: fmt.Sprintf("%s/j%d", base, j)})
		for s := range sessions {
			create = append(create, &store.CreateOp{Path: fmt.Sprintf("%s/j%d/s%d", base, j, s)})
			for n := range 5 {
				create = append(create, &store.CreateOp{Path: fmt.Sprintf("%s/j%d/s%d/n%d", base, j, s, n)})
			}
		}
		if j%8 == 7 || j == jobs-1 {
			if _, err := setup.Multi(ctx, create...); err != nil {
				b.Fatal(err)
			}
			create = create[:0]
		}
	}
	data := []byte(strings.Repeat("x", 150))
	reqs := make([][][]store.Op, sessions)
	for s := range sessions {
		for j := range jobs {
			ops := []store.Op{&store.CheckOp{Path: fmt.Sprintf("%s/j%d", base, j), Version: store.AnyVersion}}
			for n := range 5 {
				ops = append(ops, &store.SetOp{Path: fmt.Sprintf("%s/j%d/s%d/n%d", base, j, s, n), Data: data, Version: store.AnyVersion})
			}
			reqs[s] = append(reqs[s], ops)
		}
	}
	for _, c := range []struct{ ops, inflight int }{{64, 4}, {256, 4}, {1024, 2}} {
		b.Run(fmt.Sprintf("jobs=%d/ops=%d/inflight=%d", jobs, c.ops, c.inflight), func(b *testing.B) {
			benchBurst(b, reqs, c.ops, c.inflight)
		})
	}
}

// benchBurst sends reqs[s] on session s, every request at once, through a
// group committer of maxOps and inflight, once per iteration.
func benchBurst(b *testing.B, reqs [][][]store.Op, maxOps, inflight int) {
	ctx := context.Background()
	var sts []*groupcommit.Store
	for range reqs {
		raw, err := zkstore.Open(ctx, zkstore.Config{Servers: zkServers(b), Logger: testLogger(), NoGroupCommit: true})
		if err != nil {
			b.Fatal(err)
		}
		st := groupcommit.New(raw, groupcommit.WithMaxBatchOps(maxOps), groupcommit.WithMaxInFlight(inflight))
		defer func() { _ = st.Close() }()
		sts = append(sts, st)
	}
	batches := func() (n int64) {
		for _, st := range sts {
			n += st.Stats().Batches
		}
		return n
	}
	var lat []time.Duration
	var mu sync.Mutex
	var wall time.Duration
	b0 := batches()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var wg sync.WaitGroup
		for s, st := range sts {
			for _, ops := range reqs[s] {
				wg.Go(func() {
					t0 := time.Now()
					if _, err := st.Multi(ctx, ops...); err != nil {
						b.Error(err)
					}
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		wall += time.Since(start)
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[max(int(math.Ceil(p*float64(len(lat))))-1, 0)]) / 1e6
	}
	n := 0
	for _, r := range reqs {
		n += len(r)
	}
	b.ReportMetric(wall.Seconds()/float64(b.N), "burst-s")
	b.ReportMetric(float64(n*b.N)/wall.Seconds(), "multis/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(batches()-b0)/float64(b.N), "batches/burst")
}

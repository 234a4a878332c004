package pgstore_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
)

// TestWriteThroughput measures concurrent calls: PGSTORE_THROUGHPUT_STORES
// stores (default 3, as the servers of bench-fires) with
// PGSTORE_THROUGHPUT_WRITERS goroutines each (default 16) run, for
// PGSTORE_THROUGHPUT_SECONDS, what a job's Begin and Complete write: a Multi
// that checks a node, sets another and creates an ephemeral child, then one
// that deletes it, each iteration after PGSTORE_THROUGHPUT_READS reads
// (default 0; a trigger makes 3, docs/benchmarks.md). Meanwhile it samples pg_stat_activity every 20 ms and
// logs where the store's connections waited (the profile behind the write
// path's design). Skipped unless PGSTORE_THROUGHPUT_SECONDS is set.
func TestWriteThroughput(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("PGSTORE_THROUGHPUT_SECONDS"))
	if secs <= 0 {
		t.Skip("set PGSTORE_THROUGHPUT_SECONDS to measure concurrent write throughput")
	}
	nStores := envOr(t, "PGSTORE_THROUGHPUT_STORES", 3)
	writers := envOr(t, "PGSTORE_THROUGHPUT_WRITERS", 16)
	readsPer := 0
	if os.Getenv("PGSTORE_THROUGHPUT_READS") != "" {
		readsPer = envOr(t, "PGSTORE_THROUGHPUT_READS", 0)
	}
	dsn, schema := freshSchema(t)
	stores := make([]*pgstore.Store, nStores)
	for i := range stores {
		stores[i] = open(t, pgstore.Config{DSN: dsn, Schema: schema, SessionTimeout: 30 * time.Second})
	}
	ctx := testCtx(t)
	for w := range nStores * writers {
		for _, p := range []string{fmt.Sprintf("/j%d", w), fmt.Sprintf("/j%d/state", w)} {
			if _, err := stores[0].Create(ctx, p, nil, store.Persistent); err != nil {
				t.Fatal(err)
			}
		}
	}
	admin := adminConn(t, dsn)
	waits := map[string]int{}
	samples := 0
	var writes, reads, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for si, s := range stores {
		for w := range writers {
			j := fmt.Sprintf("/j%d", si*writers+w)
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					for range readsPer {
						if _, _, err := s.Get(ctx, j+"/state"); err != nil {
							failures.Add(1)
							t.Errorf("read: %v", err)
							return
						}
						reads.Add(1)
					}
					_, err := s.Multi(ctx,
						&store.CheckOp{Path: j, Version: store.AnyVersion},
						&store.SetOp{Path: j + "/state", Data: []byte("running"), Version: store.AnyVersion},
						&store.CreateOp{Path: j + "/running", Mode: store.Ephemeral})
					if err == nil {
						err = s.Delete(ctx, j+"/running", store.AnyVersion)
					}
					if err != nil {
						failures.Add(1)
						t.Errorf("write: %v", err)
						return
					}
					writes.Add(2)
				}
			})
		}
	}
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	for time.Since(start) < time.Duration(secs)*time.Second {
		<-tick.C
		rows, err := admin.Query(ctx, "SELECT coalesce(wait_event_type || ':' || wait_event, state) FROM pg_stat_activity"+
			" WHERE application_name = 'shardflow-pgstore' AND state <> 'idle'")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var w string
			if err := rows.Scan(&w); err != nil {
				t.Fatal(err)
			}
			waits[w]++
		}
		rows.Close()
		samples++
	}
	tick.Stop()
	n, nr := writes.Load(), reads.Load()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	var keys []string
	for k := range waits {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return waits[b] - waits[a] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%.2f", k, float64(waits[k])/float64(samples))
	}
	t.Logf("THROUGHPUT stores=%d writers=%d reads=%d: %.0f writes/s and %.0f reads/s (%d and %d in %.1f s, %d failed); busy connections per sample by wait:%s",
		nStores, writers, readsPer, float64(n)/elapsed.Seconds(), float64(nr)/elapsed.Seconds(), n, nr, elapsed.Seconds(), failures.Load(), b.String())
}

func envOr(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

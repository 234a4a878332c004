package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
)

// BenchmarkStatusAtRest is the status read of make bench-scale without
// ZooKeeper: a job of 10,000 items (SHARDFLOW_STATUS_ITEMS to change) over
// two servers on one memstore server, one run begun and completed on each,
// then Admin.Status read again and again. It measures the read's own CPU
// and allocations (decoding the run records, building 10,000 item rows),
// which a wall time on a shared machine cannot separate from waiting for
// ZooKeeper and for the scheduler:
//
//	go test -run '^$' -bench StatusAtRest -benchmem -count 5 ./coord
func BenchmarkStatusAtRest(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("SHARDFLOW_STATUS_ITEMS")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := memstore.NewServer()
	const ns = "statusbench"
	cfg := coordtest.Config("scale", n)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	jobs := make([]*protocol.Job, 2)
	for i := range jobs {
		reg, err := protocol.NewRegistry(srv.Connect(), protocol.RegistryConfig{Namespace: ns, ServerID: fmt.Sprintf("s%d", i), HostName: "host", Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = reg.Close(context.Background()) })
		if jobs[i], err = reg.Join(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	runs := make([]*protocol.Run, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { runs[i], errs[i] = j.Begin(ctx, time.Now()) })
	}
	wg.Wait()
	for i, r := range runs {
		if errs[i] != nil {
			b.Fatal(errs[i])
		}
		if err := r.Complete(ctx, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
	admin := coord.NewAdmin(srv.Connect(), ns)
	st, err := admin.Status(ctx, "scale")
	if err != nil {
		b.Fatal(err)
	}
	completed := 0
	for _, it := range st.Items {
		if it.Completed {
			completed++
		}
	}
	if len(st.Items) != n || completed != n {
		b.Fatalf("status: %d items, %d completed; want %d and %d", len(st.Items), completed, n, n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := admin.Status(ctx, "scale"); err != nil {
			b.Fatal(err)
		}
	}
}

package dataflow

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/storecount"
)

// idleJob is a job that is never meant to run during the measurement.
type idleJob struct{}

func (idleJob) Fetch(context.Context, Shard) ([]int, error) { return nil, nil }
func (idleJob) Process(context.Context, Shard, int) error   { return nil }
func (idleJob) String() string                              { return "idle" }
func scaleJobName(i int) string                             { return fmt.Sprintf("j%05d", i) }
func scaleJobConfig(i int) JobConfig {
	return JobConfig{JobName: scaleJobName(i), ShardingTotalCount: 4, Cron: "0 0 0 * * ?"}
}

// TestScaleJobs is the many-jobs measurement behind `make bench-jobs`:
// SHARDFLOW_SCALE_JOBS idle jobs (4 items, a daily cron) on one Node, on
// real ZooKeeper (SHARDFLOW_SCALE_STORE=mem: the embedded memstore; pg:
// coord/pgstore on Postgres). It
// logs the time to add them from 32 goroutines, the goroutines, RSS and
// heap per job at rest, the watches the server holds per job, the
// goroutines by creator, the store requests per
// AddJob, the time of Stop, and the time to add them again on a restarted
// Node (the jobs already stored). It asserts only outcomes (every job
// added, nothing left after Stop). Skipped unless SHARDFLOW_SCALE_JOBS is
// set. SHARDFLOW_SCALE_ZK_HEAP (e.g. 1g) runs a ZooKeeper of its own with
// that heap instead of the shared one.
func TestScaleJobs(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SHARDFLOW_SCALE_JOBS"))
	if n <= 0 {
		t.Skip("set SHARDFLOW_SCALE_JOBS (make bench-jobs) to run the many-jobs measurement")
	}
	adders := 32
	if a, _ := strconv.Atoi(os.Getenv("SHARDFLOW_SCALE_ADDERS")); a > 0 {
		adders = a
	}
	ns := fmt.Sprintf("scalejobs%d", time.Now().UnixNano())
	logf := func(format string, args ...any) { t.Logf("JOBS n=%d "+format, append([]any{n}, args...)...) }
	var connect func() (store.Store, func())
	// watches returns the watches the server holds (-1: unknown).
	var watches func() int
	if os.Getenv("SHARDFLOW_SCALE_STORE") == "pg" {
		// coord/pgstore on the shared Postgres, in a schema of its own.
		dsn := integration.SharedPostgres(t).NewSchema(t)
		schema := fmt.Sprintf("scalejobs_%d", time.Now().UnixNano()%1_000_000_000)
		logf("Postgres, schema %s", schema)
		connect = func() (store.Store, func()) {
			s, err := pgstore.Open(context.Background(), pgstore.Config{DSN: dsn, Schema: schema, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { _ = s.Close() }
		}
		watches = func() int { return -1 }
	} else if os.Getenv("SHARDFLOW_SCALE_STORE") == "mem" {
		srv := memstore.NewServer()
		connect = func() (store.Store, func()) {
			s := srv.Connect()
			return s, func() { _ = s.Close() }
		}
		watches = func() int { return srv.Stats().Watches }
	} else {
		var zk *integration.ZooKeeper
		if heap := os.Getenv("SHARDFLOW_SCALE_ZK_HEAP"); heap == "" {
			zk = integration.SharedZooKeeper(t)
		} else {
			// A server of its own whose heap holds the jobs' tree: the
			// shared one keeps the image's 256 MB test default, which
			// 10,000 jobs fill (docs/benchmarks.md).
			zk = integration.StartZooKeeper(t, integration.WithServerEnv("JVMFLAGS",
				"-Xmx"+heap+" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"))
		}
		watches = func() int {
			// mntr's zk_watch_count: data and child watches (wchs counts
			// only data watches).
			out, err := zk.FourLetterWord(context.Background(), "mntr")
			if err != nil {
				return -1
			}
			for l := range strings.SplitSeq(out, "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "zk_watch_count" {
					if w, err := strconv.Atoi(f[1]); err == nil {
						return w
					}
				}
			}
			return -1
		}
		// The container's own address by default: through the published
		// port, Docker's userland proxy copies every byte and took a
		// quarter of a core at 10,000 jobs, a cost no production client
		// pays (docs/benchmarks.md). SHARDFLOW_SCALE_ZK_ADDR=published
		// measures through it.
		servers := zk.Servers()
		if os.Getenv("SHARDFLOW_SCALE_ZK_ADDR") != "published" {
			var err error
			if servers, err = zk.DirectServers(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		logf("ZooKeeper at %v", servers)
		connect = func() (store.Store, func()) {
			s, err := zkstore.Open(context.Background(), zkstore.Config{Servers: servers, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { _ = s.Close() }
		}
	}

	// One process lifetime: a session, a Node, N jobs added from 32
	// goroutines; at rest it is measured; then it is stopped.
	life := func(what string, measure bool) {
		runtime.GC()
		debug.FreeOSMemory()
		g0, rss0 := runtime.NumGoroutine(), rssBytes(t)
		heap0, live0 := heapStats()
		w0 := watches()

		raw, closeStore := connect()
		cs := storecount.New(raw)
		node, err := NewNode(NodeConfig{Store: cs, Namespace: ns, ServerID: "scale", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, adders)
		for range adders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					if err := AddJob(t.Context(), node, scaleJobConfig(i), Job[int](idleJob{})); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		added := time.Since(start)
		close(errs)
		for err := range errs {
			t.Fatalf("%s: after %.1f s with %d jobs on the Node: %v", what, added.Seconds(), len(node.Jobs()), err)
		}
		if got := len(node.Jobs()); got != n {
			t.Fatalf("%s: %d jobs on the Node, want %d", what, got, n)
		}
		c := cs.Counts()
		logf("%s: AddJob x %d from %d goroutines: %.2f s (%.0f jobs/s); store requests per AddJob: %.1f (%.1f reads, %.1f writes)",
			what, n, adders, added.Seconds(), float64(n)/added.Seconds(),
			float64(c.Requests())/float64(n), float64(c.Reads)/float64(n), float64(c.Writes)/float64(n))

		if measure {
			runtime.GC()
			debug.FreeOSMemory()
			g1, rss1 := runtime.NumGoroutine(), rssBytes(t)
			heap1, live1 := heapStats()
			logf("%s at rest: %d goroutines (%.3f per job), RSS %.1f MB (%.1f KB per job), heap in use %.1f MB (%.1f KB per job), live heap %.1f MB (%.2f KB per job)",
				what, g1-g0, float64(g1-g0)/float64(n),
				float64(rss1)/1e6, float64(rss1-rss0)/1024/float64(n),
				float64(heap1)/1e6, float64(heap1-heap0)/1024/float64(n),
				float64(live1)/1e6, float64(live1-live0)/1024/float64(n))
			if w1 := watches(); w0 >= 0 && w1 >= 0 {
				logf("%s at rest: %d watches on the server (%.1f per job)", what, w1-w0, float64(w1-w0)/float64(n))
			}
			for _, l := range goroutineCreators(5) {
				logf("%s goroutines: %s", what, l)
			}
			if p := os.Getenv("SHARDFLOW_SCALE_HEAPPROFILE"); p != "" {
				f, err := os.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}

		start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// SHARDFLOW_SCALE_STOPPROFILE=prefix: a CPU profile of Stop
		// (prefix.cpu) and the goroutines 3 s into it (prefix.goroutines),
		// to see where a slow Stop waits.
		if p := os.Getenv("SHARDFLOW_SCALE_STOPPROFILE"); p != "" && measure {
			f, err := os.Create(p + ".cpu")
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err == nil {
				defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
			}
			dump := time.AfterFunc(3*time.Second, func() {
				if g, err := os.Create(p + ".goroutines"); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(g, 1)
					_ = g.Close()
				}
			})
			defer dump.Stop()
		}
		if err := node.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		logf("%s: Stop: %.2f s", what, time.Since(start).Seconds())
		closeStore()
	}
	logf("uptime: %s", uptime())
	life("first start", true)
	life("restart (jobs stored)", false)
	logf("uptime: %s", uptime())
}

// rssBytes is the process's resident set size.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// heapStats returns the heap's spans in use and its live bytes (after a
// GC: what the jobs hold). The spans in use move by a KB or two per job
// from run to run with fragmentation; the live bytes repeat to 0.1 KB per
// job, so they tell two builds' memory apart.
func heapStats() (inuse, live int64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.HeapAlloc)
}

// goroutineCreators returns the top creators of the live goroutines
// ("count created by function").
func goroutineCreators(top int) []string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	counts := map[string]int{}
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if i := strings.Index(g, "created by "); i >= 0 {
			line := g[i+len("created by "):]
			if j := strings.IndexAny(line, " \n"); j >= 0 {
				line = line[:j]
			}
			counts[line]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	var out []string
	for i, k := range keys {
		if i == top {
			break
		}
		out = append(out, fmt.Sprintf("%d created by %s", counts[k], k))
	}
	return out
}

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return "load average " + strings.Join(strings.Fields(string(b))[:3], " ")
}

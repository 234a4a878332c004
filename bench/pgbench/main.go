// Command pgbench measures shardflow's Postgres claim mode against a
// hand-written pgx loop with the same SQL, against river working the same
// number of no-op jobs, and against one UPDATE of the whole table, all on
// the same Postgres in one run. It prints a Markdown table for
// docs/benchmarks.md.
//
//	cd bench && go run ./pgbench --pg postgres://postgres@127.0.0.1:5432/postgres --rows 1000000
//
// Each measurement gets its own freshly created database
// (shardflow_bench_<pid>_<name>), dropped afterwards.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

type result struct {
	name    string
	rows    int64
	elapsed time.Duration
	// startup is the part of elapsed before the first fetch (shardflow:
	// the Nodes' start, registration and sharding).
	startup time.Duration
	note    string
	// cpuNote: the Postgres server's CPU over the timed part (--pg-cpuacct).
	cpuNote string
}

func (r result) rate() float64 { return float64(r.rows) / r.elapsed.Seconds() }

// drainRate names the startup and the rate from the first fetch on.
func (r result) drainRate() string {
	return fmt.Sprintf("%.2fs to the first fetch, then %.0f rows/s", r.startup.Seconds(), float64(r.rows)/(r.elapsed-r.startup).Seconds())
}

func main() {
	dsn := flag.String("pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN of a role that may CREATE DATABASE (default $SHARDFLOW_PG)")
	rows := flag.Int64("rows", 1_000_000, "rows (and river jobs) per measurement")
	batch := flag.Int("batch", 1000, "FetchDataCount: rows claimed per fetch")
	items := flag.Int("items", 8, "ShardingTotalCount")
	flag.IntVar(&workersPerItem, "threads", 1, "ConcurrentDataProcessThreadCount of the shardflow measurements: workers per item (above 1 each batch is cut into that many slices, each its own transaction in the transactional mode)")
	riverWorkers := flag.Int("river-workers", 2000, "river MaxWorkers")
	only := flag.String("only", "", "comma-separated subset of: shardflow,shardflow-tx,shardflow-tx-pgcoord,shardflow-tx-shared,pgx,river,update")
	rounds := flag.Int("rounds", 1, "rounds of every measurement, in alternating order (odd rounds reversed); the table shows each one's median")
	profile := flag.Bool("profile", false, "print where each measurement's Postgres work goes: WAL per row (pg_stat_wal), statements (pg_stat_statements, if the server preloads it), the backends' wait events sampled every 20 ms (the sampling costs the server some CPU: measure throughput without it)")
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile (the Go side: engine, pgx, scanning) to this file")
	flag.StringVar(&pgCPUFile, "pg-cpuacct", "", "the Postgres server's cgroup CPU counter in nanoseconds (cgroup v1: /sys/fs/cgroup/cpuacct/docker/<id>/cpuacct.usage): "+
		"each measurement's note then gives the server's CPU seconds over its timed part alone (seeding excluded)")
	flag.Parse()
	poolConns = int32(max(32, *items*(workersPerItem+1)))
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	if *profile {
		p, err := newProfiler(context.Background(), *dsn)
		if err != nil {
			fatal(err)
		}
		prof = p
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	want := func(n string) bool { return *only == "" || strings.Contains(","+*only+",", ","+n+",") }

	var results []result
	run := func(name string, fn func(context.Context, *pgxpool.Pool) (result, error)) {
		if !want(name) {
			return
		}
		pool, _, drop, err := freshDB(ctx, *dsn, name)
		if err != nil {
			fatal(err)
		}
		r, err := fn(ctx, pool)
		pool.Close()
		drop()
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
		fmt.Fprintf(os.Stderr, "%-10s %9d rows in %8s = %9.0f rows/s  %s\n", name, r.rows, r.elapsed.Round(time.Millisecond), r.rate(), r.note)
		results = append(results, r)
	}
	measurements := []struct {
		name string
		fn   func(context.Context, *pgxpool.Pool) (result, error)
	}{
		{"shardflow", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			return benchShardflow(ctx, p, *rows, *items, *batch, false)
		}},
		{"shardflow-tx", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			return benchShardflow(ctx, p, *rows, *items, *batch, true)
		}},
		{"shardflow-tx-pgcoord", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			// Coordination on pgstore in a database of its own on the same
			// server: every batch asks the store (a separate check).
			_, coordDSN, drop, err := freshDB(ctx, *dsn, "coord")
			if err != nil {
				return result{}, err
			}
			defer drop()
			return benchShardflowPgCoord(ctx, p, coordDSN, *rows, *items, *batch, false)
		}},
		{"shardflow-tx-shared", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			// Coordination and data in one database: every batch checks its
			// ownership in its own transaction.
			return benchShardflowPgCoord(ctx, p, p.Config().ConnString(), *rows, *items, *batch, true)
		}},
		{"pgx", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			return benchPgxLoop(ctx, p, *rows, *items, *batch)
		}},
		{"river", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			return benchRiver(ctx, p, *rows, *riverWorkers)
		}},
		{"update", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
			return benchUpdate(ctx, p, *rows)
		}},
	}
	// Alternating order spreads a shared machine's changing load evenly
	// over the measurements being compared.
	for round := range max(1, *rounds) {
		for i := range measurements {
			m := measurements[i]
			if round%2 == 1 {
				m = measurements[len(measurements)-1-i]
			}
			run(m.name, m.fn)
		}
	}
	results = medians(results)

	var version string
	if len(results) > 0 {
		pool, err := postgres.Connect(ctx, *dsn, 1)
		if err == nil {
			_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
			pool.Close()
		}
	}
	fmt.Printf("Postgres %s, %d CPUs (GOMAXPROCS %d), %d rows, %d items, batch %d, %d round(s) (medians)\n\n", version, runtime.NumCPU(), runtime.GOMAXPROCS(0), *rows, *items, *batch, max(1, *rounds))
	fmt.Println("| measurement | rows | seconds | rows/s | shardflow's ratio to it | notes |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | --- |")
	var sf float64
	for _, r := range results {
		if r.name == "shardflow" {
			sf = r.rate()
		}
	}
	for _, r := range results {
		ratio := "-"
		if sf > 0 && r.name != "shardflow" {
			ratio = fmt.Sprintf("%.2fx", sf/r.rate())
		}
		fmt.Printf("| %s | %d | %.2f | %.0f | %s | %s |\n", r.name, r.rows, r.elapsed.Seconds(), r.rate(), ratio, r.note)
	}
	rate := map[string]float64{}
	for _, r := range results {
		rate[r.name] = r.rate()
	}
	fmt.Println()
	for _, t := range []struct {
		a, b   string
		target float64
	}{{"shardflow", "pgx", 0.9}, {"shardflow", "river", 3}, {"shardflow-tx", "update", 0.5},
		{"shardflow-tx-shared", "update", 0.5}, {"shardflow-tx-shared", "shardflow-tx-pgcoord", 0}} {
		if rate[t.a] > 0 && rate[t.b] > 0 {
			target := ""
			if t.target > 0 {
				target = fmt.Sprintf(" (target >= %.1fx)", t.target)
			}
			fmt.Printf("- %s / %s = %.2fx%s\n", t.a, t.b, rate[t.a]/rate[t.b], target)
		}
	}
}

// medians keeps, per measurement name, the round with the median rate
// (the lower middle one for an even count), in first-seen order.
func medians(results []result) []result {
	by := map[string][]result{}
	var order []string
	for _, r := range results {
		if _, ok := by[r.name]; !ok {
			order = append(order, r.name)
		}
		by[r.name] = append(by[r.name], r)
	}
	out := make([]result, 0, len(order))
	for _, n := range order {
		rs := by[n]
		sort.Slice(rs, func(i, j int) bool { return rs[i].rate() < rs[j].rate() })
		m := rs[(len(rs)-1)/2]
		if len(rs) > 1 {
			var all []string
			for _, r := range by[n] {
				all = append(all, fmt.Sprintf("%.0f", r.rate()))
			}
			m.note += fmt.Sprintf("; median of %d rounds (rows/s: %s)", len(rs), strings.Join(all, ", "))
		}
		out = append(out, m)
	}
	return out
}

// pgCPUFile is --pg-cpuacct.
var pgCPUFile string

// workersPerItem is --threads; poolConns the size of each measurement's
// pool: a connection for every worker and item's fetch, 32 at least.
var (
	workersPerItem int
	poolConns      int32 = 32
)

// pgCPU returns a func that, called at the end of a timed part (name's, of
// rows rows), describes the CPU time since pgCPU was called: the Postgres
// server's (without --pg-cpuacct or when its counter cannot be read,
// none), this process's (the client side: engine, pgx, river's workers),
// and the machine's 1-minute load average at the end; with --profile it
// also prints the part's profile (profiler). On a shared machine the CPU seconds
// stay put while the wall time swings with the load: they tell a change
// of the work done from a change of the machine.
func pgCPU(name string, rows int64) func() string {
	read := func() (int64, bool) {
		if pgCPUFile == "" {
			return 0, false
		}
		b, err := os.ReadFile(pgCPUFile)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	var profiled func(string, int64)
	if prof != nil {
		profiled = prof.start(context.Background())
	}
	start, ok := read()
	self := processCPU()
	return func() string {
		if profiled != nil {
			defer profiled(name, rows)
		}
		var out string
		if end, ok2 := read(); ok && ok2 {
			out = fmt.Sprintf("; Postgres CPU %.2fs", float64(end-start)/1e9)
		}
		out += fmt.Sprintf("; bench process CPU %.2fs", (processCPU() - self).Seconds())
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				out += "; load " + f[0]
			}
		}
		return out
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "pgbench:", err)
	os.Exit(1)
}

// freshDB creates database shardflow_bench_<pid>_<name> and returns a pool
// on it, its DSN and a func dropping it.
func freshDB(ctx context.Context, dsn, name string) (*pgxpool.Pool, string, func(), error) {
	admin, err := postgres.Connect(ctx, dsn, 1)
	if err != nil {
		return nil, "", nil, err
	}
	db := fmt.Sprintf("shardflow_bench_%d_%s", os.Getpid(), strings.ReplaceAll(name, "-", "_"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		admin.Close()
		return nil, "", nil, fmt.Errorf("creating database %s: %w", db, err)
	}
	drop := func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "pgbench: dropping", db+":", err)
		}
		admin.Close()
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, cfg.Password), Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + db}
	pool, err := postgres.Connect(ctx, u.String(), poolConns)
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return pool, u.String(), drop, nil
}

// seedWork creates a work table "work" with n pending rows: the business
// columns, Migrate's bookkeeping columns (added while the table is empty),
// then COPY.
func seedWork(ctx context.Context, pool *pgxpool.Pool, n int64) error {
	if _, err := pool.Exec(ctx, `CREATE TABLE work (id bigint PRIMARY KEY, payload text NOT NULL)`); err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, pool, postgres.TableSpec{Table: "work"}); err != nil {
		return err
	}
	var i int64
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"work"}, []string{"id", "payload"}, pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		return []any{i, "x"}, nil
	})); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE work")
	return err
}

func countDone(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM work WHERE shardflow_status = 'done'`).Scan(&n)
	return n, err
}

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
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

type result struct {
	name    string
	rows    int64
	elapsed time.Duration
	note    string
}

func (r result) rate() float64 { return float64(r.rows) / r.elapsed.Seconds() }

func main() {
	dsn := flag.String("pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN of a role that may CREATE DATABASE (default $SHARDFLOW_PG)")
	rows := flag.Int64("rows", 1_000_000, "rows (and river jobs) per measurement")
	batch := flag.Int("batch", 1000, "FetchDataCount: rows claimed per fetch")
	items := flag.Int("items", 8, "ShardingTotalCount")
	riverWorkers := flag.Int("river-workers", 2000, "river MaxWorkers")
	only := flag.String("only", "", "comma-separated subset of: shardflow,shardflow-tx,pgx,river,update")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	want := func(n string) bool { return *only == "" || strings.Contains(","+*only+",", ","+n+",") }

	var results []result
	run := func(name string, fn func(context.Context, *pgxpool.Pool) (result, error)) {
		if !want(name) {
			return
		}
		pool, drop, err := freshDB(ctx, *dsn, name)
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
	run("shardflow", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
		return benchShardflow(ctx, p, *rows, *items, *batch, false)
	})
	run("shardflow-tx", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
		return benchShardflow(ctx, p, *rows, *items, *batch, true)
	})
	run("pgx", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
		return benchPgxLoop(ctx, p, *rows, *items, *batch)
	})
	run("river", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
		return benchRiver(ctx, p, *rows, *riverWorkers)
	})
	run("update", func(ctx context.Context, p *pgxpool.Pool) (result, error) {
		return benchUpdate(ctx, p, *rows)
	})

	var version string
	if len(results) > 0 {
		pool, err := postgres.Connect(ctx, *dsn, 1)
		if err == nil {
			_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
			pool.Close()
		}
	}
	fmt.Printf("Postgres %s, %d CPUs (GOMAXPROCS %d), %d rows, %d items, batch %d\n\n", version, runtime.NumCPU(), runtime.GOMAXPROCS(0), *rows, *items, *batch)
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
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "pgbench:", err)
	os.Exit(1)
}

// freshDB creates database shardflow_bench_<pid>_<name> and returns a pool
// on it and a func dropping it.
func freshDB(ctx context.Context, dsn, name string) (*pgxpool.Pool, func(), error) {
	admin, err := postgres.Connect(ctx, dsn, 1)
	if err != nil {
		return nil, nil, err
	}
	db := fmt.Sprintf("shardflow_bench_%d_%s", os.Getpid(), strings.ReplaceAll(name, "-", "_"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("creating database %s: %w", db, err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, cfg.Password), Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + db}
	pool, err := postgres.Connect(ctx, u.String(), 32)
	if err != nil {
		return nil, nil, err
	}
	return pool, func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "pgbench: dropping", db+":", err)
		}
		admin.Close()
	}, nil
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

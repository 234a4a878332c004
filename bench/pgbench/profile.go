package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/sources/postgres"
)

// profiler is --profile: where the Postgres server's work goes during each
// measurement's timed part, read from the server's own statistics on a
// connection of its own to the --pg database. Per measurement it prints
// the WAL written (pg_stat_wal), the statements run (pg_stat_statements,
// when the server preloads it: -c shared_preload_libraries=pg_stat_statements)
// and what the bench's backends were doing, sampled every 20 ms from
// pg_stat_activity (on CPU, or the wait event; for lock waits the
// statement waiting). The sampling itself costs the server a little CPU:
// measure throughput without it.
type profiler struct {
	pool       *pgxpool.Pool
	statements bool // pg_stat_statements is there
}

// prof is the run's profiler; nil without --profile.
var prof *profiler

func newProfiler(ctx context.Context, dsn string) (*profiler, error) {
	pool, err := postgres.Connect(ctx, dsn, 2)
	if err != nil {
		return nil, err
	}
	p := &profiler{pool: pool}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		_, err = pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
		p.statements = err == nil
	}
	if !p.statements {
		fmt.Fprintln(os.Stderr, "pgbench --profile: no pg_stat_statements (start the server with -c shared_preload_libraries=pg_stat_statements); WAL and wait events only")
	}
	return p, nil
}

// walStat is pg_stat_wal's counters.
type walStat struct {
	records, fpi, bytes int64
}

func (p *profiler) wal(ctx context.Context) (walStat, error) {
	var w walStat
	err := p.pool.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal`).Scan(&w.records, &w.fpi, &w.bytes)
	return w, err
}

// start begins profiling a timed part; the func it returns ends it and
// prints the profile, per row of rows.
func (p *profiler) start(ctx context.Context) func(name string, rows int64) {
	w0, werr := p.wal(ctx)
	if p.statements {
		if _, err := p.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			fmt.Fprintln(os.Stderr, "pgbench --profile:", err)
		}
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	samples := map[string]int{}
	var total, ticks int
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			rows, err := p.pool.Query(sctx, `SELECT CASE
    WHEN backend_type = 'autovacuum worker' THEN 'autovacuum worker'
    WHEN state = 'active' AND wait_event IS NULL THEN 'on CPU'
    WHEN state = 'active' AND wait_event_type = 'Lock' THEN 'Lock:' || wait_event || ' (' || left(regexp_replace(query, '\s+', ' ', 'g'), 60) || ')'
    WHEN state = 'active' THEN wait_event_type || ':' || wait_event
    ELSE coalesce(state, '?') || coalesce(' ' || wait_event_type || ':' || wait_event, '') END
  FROM pg_stat_activity
  WHERE pid <> pg_backend_pid() AND (datname LIKE 'shardflow_bench_%' OR backend_type = 'autovacuum worker')`)
			if err != nil {
				continue
			}
			ticks++
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					samples[s]++
					total++
				}
			}
			rows.Close()
		}
	})
	return func(name string, n int64) {
		stop()
		wg.Wait()
		var b strings.Builder
		fmt.Fprintf(&b, "profile of %s (%d rows):\n", name, n)
		if w1, err := p.wal(ctx); err == nil && werr == nil {
			fmt.Fprintf(&b, "  WAL: %d records (%.2f per row), %d full-page images, %.1f MB (%.0f bytes per row)\n",
				w1.records-w0.records, float64(w1.records-w0.records)/float64(n), w1.fpi-w0.fpi,
				float64(w1.bytes-w0.bytes)/1e6, float64(w1.bytes-w0.bytes)/float64(n))
		}
		if p.statements {
			p.printStatements(ctx, &b, n)
		}
		if ticks > 0 {
			fmt.Fprintf(&b, "  backends sampled every 20 ms, %d samples: mean per sample", ticks)
			keys := make([]string, 0, len(samples))
			for k := range samples {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return samples[keys[i]] > samples[keys[j]] })
			for _, k := range keys {
				fmt.Fprintf(&b, "\n    %6.2f  %s", float64(samples[k])/float64(ticks), k)
			}
			b.WriteString("\n")
		}
		fmt.Fprint(os.Stderr, b.String())
	}
}

// printStatements writes the statements of the timed part, most
// execution time first.
func (p *profiler) printStatements(ctx context.Context, b *strings.Builder, n int64) {
	rows, err := p.pool.Query(ctx, `SELECT calls, rows, total_exec_time, total_plan_time,
    shared_blks_hit + shared_blks_read, shared_blks_dirtied, wal_records, wal_bytes::bigint,
    left(regexp_replace(query, '\s+', ' ', 'g'), 90)
  FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
  WHERE d.datname LIKE 'shardflow_bench_%'
  ORDER BY total_exec_time DESC LIMIT 10`)
	if err != nil {
		fmt.Fprintf(b, "  pg_stat_statements: %v\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(b, "  statements (pg_stat_statements): calls, rows, exec ms, plan ms, buffers and WAL records per row of the drain, query\n")
	var execMS float64
	for rows.Next() {
		var calls, nrows, blks, dirtied, walRecords, walBytes int64
		var exec, plan float64
		var q string
		if err := rows.Scan(&calls, &nrows, &exec, &plan, &blks, &dirtied, &walRecords, &walBytes, &q); err != nil {
			fmt.Fprintf(b, "  pg_stat_statements: %v\n", err)
			return
		}
		execMS += exec
		fmt.Fprintf(b, "    %7d %8d %9.0f %7.0f  buf %5.2f dirtied %5.2f wal %5.2f (%4.0f B)  %s\n", calls, nrows, exec, plan,
			float64(blks)/float64(n), float64(dirtied)/float64(n), float64(walRecords)/float64(n), float64(walBytes)/float64(n), q)
	}
	fmt.Fprintf(b, "    statements' execution time %.2f s (%.2f us per row)\n", execMS/1e3, execMS*1e3/float64(n))
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sources/postgres"
)

type workOptions struct {
	dsn, zk, serverID, namespace string
	follow                       bool
	items, batch, threads        int
	sessionTimeout               time.Duration
}

func runWork(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("work", flag.ExitOnError)
	var o workOptions
	host, _ := os.Hostname()
	fs.StringVar(&o.dsn, "pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN (default $SHARDFLOW_PG)")
	fs.StringVar(&o.zk, "zk", os.Getenv("SHARDFLOW_ZK"), "ZooKeeper hosts, comma-separated host:port (default $SHARDFLOW_ZK)")
	fs.StringVar(&o.serverID, "server-id", host+"-"+strconv.Itoa(os.Getpid()), "this worker's server id, distinct per process")
	fs.StringVar(&o.namespace, "namespace", "shardflow", "ZooKeeper namespace")
	fs.BoolVar(&o.follow, "follow", false, "keep running when no row is pending")
	fs.IntVar(&o.items, "items", 8, "ShardingTotalCount")
	fs.IntVar(&o.batch, "batch", 500, "FetchDataCount: rows per fetch")
	fs.IntVar(&o.threads, "threads", 2, "ConcurrentDataProcessThreadCount: transactions per item at once")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 6*time.Second, "ZooKeeper session timeout")
	_ = fs.Parse(args)
	if o.zk == "" {
		return errors.New("work: --zk is empty; name the ZooKeeper servers (host:port,...)")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("server", o.serverID)

	pool, err := postgres.Connect(ctx, o.dsn, int32(o.items*o.threads+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}
	src, err := postgres.NewSource[Source](ctx, postgres.Config{Pool: pool, Table: sourceSpec, ServerID: o.serverID, Logger: logger})
	if err != nil {
		return err
	}
	job := src.Transactional(process(o.serverID))

	st, err := zkstore.Open(ctx, zkstore.Config{Servers: strings.Split(o.zk, ","), SessionTimeout: o.sessionTimeout, Logger: logger})
	if err != nil {
		return fmt.Errorf("work: %w", err)
	}
	defer st.Close()
	cfg := dataflow.JobConfig{
		JobName:                          "pgbatch",
		Cron:                             "0/1 * * * * ?",
		ShardingTotalCount:               o.items,
		FetchDataCount:                   o.batch,
		ConcurrentDataProcessThreadCount: o.threads,
		StreamingProcess:                 true,
		Failover:                         true,
		ReconcileIntervalSeconds:         5,
		ProcessCountIntervalSeconds:      60,
	}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("work: job config: %w", err)
	}
	return hostJob(ctx, st, o, cfg, job, pool, logger)
}

// hostJob runs the job on the coord protocol and the dataflow pipeline
// engine, one run at a time, following the trigger sequence of
// ARCHITECTURE.md: Begin -> RunBatchJob over the run's fenced shards ->
// Complete -> misfire catch-up -> failover claim. It stands in for
// dataflow.Node until that lands. It returns when ctx ends or, without
// --follow, when no row is pending. It owns no goroutine.
func hostJob(ctx context.Context, st *zkstore.Store, o workOptions, cfg dataflow.JobConfig, job *postgres.TxJob[Source], pool *pgxpool.Pool, logger *slog.Logger) error {
	reg, err := coord.NewRegistry(st, coord.RegistryConfig{Namespace: o.namespace, ServerID: o.serverID, Logger: logger})
	if err != nil {
		return fmt.Errorf("work: coord registry: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Close(cctx)
	}()
	var cj *coord.Job
	for {
		// A previous process with this server id may still hold its session.
		cj, err = reg.Join(ctx, cfg)
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrServerIDInUse) || ctx.Err() != nil {
			return fmt.Errorf("work: joining job %s: %w", cfg.JobName, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cj.Leave(cctx)
	}()
	sched, err := jobconfig.ParseCron(cfg.Cron)
	if err != nil {
		return err
	}
	timer := time.NewTimer(time.Until(sched.Next(time.Now())))
	defer timer.Stop()
	var processed int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case sig, ok := <-cj.Signals():
			if !ok || sig == coord.SignalShutdown || sig == coord.SignalRemoved {
				return nil
			}
		}
		for ctx.Err() == nil {
			processed += runOnce(ctx, cj, job, logger)
			if again, err := cj.TakeMisfire(ctx); err == nil && again {
				continue
			}
			if claimed, err := cj.ClaimFailover(ctx); err == nil && claimed {
				continue
			}
			break
		}
		if !o.follow {
			var left int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgbatch_source WHERE status IN ('pending', 'claimed')`).Scan(&left); err == nil && left == 0 {
				fmt.Printf("work %s: no pending row left; processed %d rows\n", o.serverID, processed)
				return nil
			}
		}
		timer.Reset(time.Until(sched.Next(time.Now())))
	}
}

func runOnce(ctx context.Context, cj *coord.Job, job *postgres.TxJob[Source], logger *slog.Logger) int64 {
	run, err := cj.Begin(ctx, time.Now())
	switch {
	case err == nil:
	case errors.Is(err, coord.ErrItemsRunning), errors.Is(err, coord.ErrPaused), ctx.Err() != nil:
		return 0
	default:
		logger.Warn("pgbatch: begin", "err", err)
		return 0
	}
	cfg := cj.Config()
	var shards []dataflow.Shard
	for _, a := range run.Shards() {
		item := a.Item
		shards = append(shards, dataflow.Shard{
			JobName: cfg.JobName, Item: a.Item, Total: cfg.ShardingTotalCount,
			FetchCount: cfg.FetchDataCount, Epoch: a.Epoch, Failover: a.Failover,
		}.WithFence(func(ctx context.Context) error { return run.CheckOwnership(ctx, item) }))
	}
	// The run's context ends on ownership loss; ctx (SIGTERM) ends it too.
	rctx, cancel := context.WithCancel(run.Context())
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	res := dataflow.RunBatchJob[postgres.Row[Source]](rctx, job, shards, dataflow.PipelineConfig{
		JobName: cfg.JobName, Threads: cfg.ConcurrentDataProcessThreadCount, Streaming: cfg.StreamingProcess,
		KeepGoing: run.KeepGoing, ErrorPolicy: dataflow.ErrorPolicyLog, Logger: logger,
	})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := run.Complete(cctx, time.Time{}); err != nil && rctx.Err() == nil {
		logger.Warn("pgbatch: complete", "err", err)
	}
	return res.Success
}

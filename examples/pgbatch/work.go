package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/sources/postgres"
)

type workOptions struct {
	dsn, coord, zk, serverID string
	namespace                string
	follow, history          bool
	items, batch, threads    int
	sessionTimeout           time.Duration
	stopGrace                time.Duration
	offlineGrace             time.Duration
	batchDelay               time.Duration
}

func runWork(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("work", flag.ExitOnError)
	var o workOptions
	host, _ := os.Hostname()
	fs.StringVar(&o.dsn, "pg", os.Getenv("SHARDFLOW_PG"), "Postgres DSN (default $SHARDFLOW_PG)")
	fs.StringVar(&o.coord, "coord", os.Getenv("SHARDFLOW_COORD"), "coordination store: ZooKeeper host:port,... or a postgres:// URL, the --pg one for coordination and data in one database (default $SHARDFLOW_COORD, else --zk)")
	fs.StringVar(&o.zk, "zk", os.Getenv("SHARDFLOW_ZK"), "ZooKeeper hosts, comma-separated host:port (default $SHARDFLOW_ZK; --coord wins)")
	fs.StringVar(&o.serverID, "server-id", host+"-"+strconv.Itoa(os.Getpid()), "this worker's server id, distinct per process")
	fs.StringVar(&o.namespace, "namespace", "shardflow", "ZooKeeper namespace")
	fs.BoolVar(&o.follow, "follow", false, "keep running when no row is pending")
	fs.BoolVar(&o.history, "history", true, "record every item run in table shardflow_history of the same database (see `shardflow history`)")
	fs.IntVar(&o.items, "items", 8, "ShardingTotalCount")
	fs.IntVar(&o.batch, "batch", 500, "FetchDataCount: rows per fetch")
	fs.IntVar(&o.threads, "threads", 2, "ConcurrentDataProcessThreadCount: transactions per item at once")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 6*time.Second, "coordination session timeout")
	fs.DurationVar(&o.batchDelay, "batch-delay", 0, "hold each batch's transaction open this long before writing (simulated slow work)")
	fs.DurationVar(&o.stopGrace, "stop-grace", 30*time.Second, "on SIGTERM, how long runs in progress get to finish before they are cancelled (their batch rolls back)")
	fs.DurationVar(&o.offlineGrace, "offline-server-grace", 0, "how long a server that went offline stays listed before the job's leader prunes it (dataflow.NodeConfig.OfflineServerGrace; 0: its default, 10m)")
	_ = fs.Parse(args)
	if o.coord == "" {
		o.coord = o.zk
	}
	if o.coord == "" {
		return errors.New("work: --coord is empty; name the ZooKeeper servers (host:port,...) or a postgres:// URL (--zk still works)")
	}
	// The Node adds server to its lines; this program's own lines add it here.
	nodeLogger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	logger := nodeLogger.With("server", o.serverID)

	var pool *pgxpool.Pool
	if err := untilReachable(ctx, logger, "connect", func() (err error) {
		pool, err = postgres.Connect(ctx, o.dsn, int32(o.items*o.threads+3))
		return err
	}); err != nil {
		return err
	}
	defer pool.Close()
	if err := untilReachable(ctx, logger, "set up the tables", func() error { return setup(ctx, pool) }); err != nil {
		return err
	}
	var src *postgres.Source[Source]
	if err := untilReachable(ctx, logger, "open the source", func() (err error) {
		src, err = postgres.NewSource[Source](ctx, postgres.Config{Pool: pool, Table: sourceSpec, Logger: logger})
		return err
	}); err != nil {
		return err
	}
	job := src.Transactional(process(o.serverID, o.batchDelay))

	st, err := connect.Open(ctx, connect.Config{Coord: o.coord, SessionTimeout: o.sessionTimeout, Logger: logger})
	if err != nil {
		return fmt.Errorf("work: %s: %w", connect.Describe(o.coord), err)
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
		ReconcileInterval:                5 * time.Second,
		ProcessCountInterval:             time.Minute,
	}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("work: job config: %w", err)
	}
	var (
		rec         history.Recorder
		stopHistory func()
	)
	if err := untilReachable(ctx, logger, "start the history recorder", func() (err error) {
		rec, stopHistory, err = startHistory(ctx, o, pool, logger)
		return err
	}); err != nil {
		return err
	}
	defer stopHistory() // after node.Stop (defers run in reverse): the last runs are recorded
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, Namespace: o.namespace, ServerID: o.serverID, Logger: nodeLogger, History: rec, OfflineServerGrace: o.offlineGrace})
	if err != nil {
		return fmt.Errorf("work: %w", err)
	}
	defer func() {
		// Graceful: streaming loops end after their batch; a batch's
		// transaction commits or rolls back whole either way.
		sctx, cancel := context.WithTimeout(context.Background(), o.stopGrace)
		defer cancel()
		switch err := node.Stop(sctx); {
		case errors.Is(err, context.DeadlineExceeded):
			fmt.Printf("work %s: --stop-grace %s ended: runs cancelled, their batches rolled back\n", o.serverID, o.stopGrace)
			<-node.Stopped() // the cancelled runs complete and the server leaves (bounded to 10 s)
		case err != nil:
			logger.Warn("pgbatch: stopping the node", "err", err)
		}
	}()
	for {
		// A previous process with this server id (killed) may still hold
		// its session until the session timeout.
		err = dataflow.AddBatchJob[postgres.Row[Source]](ctx, node, cfg, job)
		if err == nil {
			break
		}
		if !errors.Is(err, protocol.ErrServerIDInUse) || ctx.Err() != nil {
			return fmt.Errorf("work: adding job %s: %w", cfg.JobName, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := node.Start(ctx); err != nil {
		return fmt.Errorf("work: %w", err)
	}
	fmt.Printf("work %s: started\n", o.serverID)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if o.follow {
			continue
		}
		if pending, err := anyPending(ctx, pool); err == nil && !pending {
			fmt.Printf("work %s: no pending row left\n", o.serverID)
			return nil
		}
	}
}

// untilReachable runs a start-up step against Postgres again while it
// fails because Postgres is unreachable or restarting
// (postgres.IsTransient), so that a worker started beside a Postgres
// restart waits for it rather than exiting; any other error, or ctx
// ending, returns at once.
func untilReachable(ctx context.Context, logger *slog.Logger, step string, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || !postgres.IsTransient(err) || ctx.Err() != nil {
			return err
		}
		logger.Warn("pgbatch: Postgres unreachable; trying again", "step", step, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// startHistory starts the history recorder (pghistory in the job's own
// database) unless --history=false; stop flushes what is queued.
func startHistory(ctx context.Context, o workOptions, pool *pgxpool.Pool, logger *slog.Logger) (rec history.Recorder, stop func(), err error) {
	if !o.history {
		return nil, func() {}, nil
	}
	buf, _, err := pghistory.NewBuffer(ctx, pghistory.Config{Pool: pool, Logger: logger}, history.BufferConfig{Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("work: history: %w", err)
	}
	return buf, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := buf.Stop(sctx); err != nil {
			logger.Warn("pgbatch: flushing history", "err", err, "stats", buf.Stats().String())
		}
	}, nil
}

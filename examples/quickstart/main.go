// Command quickstart is the worker of docs/quickstart.md: it settles the
// rows of your own table "invoices", as one server of job
// "settle-invoices", on the ZooKeeper of $SHARDFLOW_ZK and the Postgres
// of $SHARDFLOW_PG. Run `quickstart migrate` once, then as many
// `quickstart work --server-id ID` as you like.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/sources/postgres"
)

// Invoice is one row of the invoices table, as the job reads it. The
// nullable customer column is a pointer: NULL fits it.
type Invoice struct {
	ID          int64   `db:"id"`
	Customer    *string `db:"customer"`
	AmountCents int64   `db:"amount_cents"`
}

// invoices names the table, its key and the columns the job reads.
var invoices = postgres.TableSpec{Table: "invoices", Key: "id", Columns: []string{"id", "customer", "amount_cents"}}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 || (os.Args[1] != "migrate" && os.Args[1] != "work") {
		fmt.Fprintln(os.Stderr, "usage: quickstart migrate | quickstart work --server-id ID [--items N]")
		os.Exit(2)
	}
	pool, err := postgres.Connect(ctx, os.Getenv("SHARDFLOW_PG"), 20)
	if err != nil {
		fail(err)
	}
	defer pool.Close()
	if os.Args[1] == "migrate" {
		// The bookkeeping columns beside yours, the work index, the fence table.
		if err := postgres.Migrate(ctx, pool, invoices); err != nil {
			fail(err)
		}
		fmt.Println("migrate: invoices is ready")
		return
	}
	fs := flag.NewFlagSet("work", flag.ExitOnError)
	serverID := fs.String("server-id", "", "this worker's id, one per process (required)")
	items := fs.Int("items", 8, "ShardingTotalCount: the job's shard items")
	_ = fs.Parse(os.Args[2:])
	if err := work(ctx, pool, *serverID, *items); err != nil {
		fail(err)
	}
}

func work(ctx context.Context, pool *pgxpool.Pool, serverID string, items int) error {
	if serverID == "" {
		return errors.New("work: --server-id is required, one per process (w1, w2, ...)")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := postgres.NewSource[Invoice](ctx, postgres.Config{Pool: pool, Table: invoices, Logger: logger})
	if err != nil {
		return err
	}
	// Transactional mode: the effect, the done marks and the fencing check
	// commit together, exactly once whatever happens to the workers.
	job := src.Transactional(func(ctx context.Context, tx pgx.Tx, shard dataflow.Shard, batch []Invoice) error {
		ids := make([]int64, len(batch))
		for i, inv := range batch {
			ids[i] = inv.ID
		}
		_, err := tx.Exec(ctx, `UPDATE invoices SET settled_at = now() WHERE id = ANY($1)`, ids)
		return err
	})
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: strings.Split(os.Getenv("SHARDFLOW_ZK"), ","), Logger: logger})
	if err != nil {
		return err
	}
	defer st.Close()
	// Every item run recorded in shardflow_history (`shardflow history`).
	rec, _, err := pghistory.NewBuffer(ctx, pghistory.Config{Pool: pool, Logger: logger}, history.BufferConfig{Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rec.Stop(sctx)
	}()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, ServerID: serverID, Logger: logger, History: rec})
	if err != nil {
		return err
	}
	cfg := dataflow.JobConfig{
		JobName:            "settle-invoices",
		Cron:               "0/5 * * * * ?", // every 5 seconds
		ShardingTotalCount: items,
		FetchDataCount:     500,
		StreamingProcess:   true, // each run goes on while rows are pending
		Failover:           true, // a crashed worker's running items run again at once
	}
	if err := dataflow.AddBatchJob[postgres.Row[Invoice]](ctx, node, cfg, job); err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("work %s: running job %s\n", serverID, cfg.JobName)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return node.Stop(sctx)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "quickstart:", err)
	os.Exit(1)
}

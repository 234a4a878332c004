package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sinks/pgsink"
	"github.com/shardflow/shardflow/sources/postgres"
)

// newNode is each replica's Node: it joins the same ZooKeeper ensemble as
// the other replicas, which decides which replica owns which shard item.
func newNode(ctx context.Context) *dataflow.Node {
	zk, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{"zk-0:2181", "zk-1:2181", "zk-2:2181"}})
	if err != nil {
		log.Fatal(err) // names the servers it could not reach
	}
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: zk, ServerID: "pod-1"})
	if err != nil {
		log.Fatal(err)
	}
	return node
}

// notify stands for a call to another system, which cannot join the
// database's transaction.
func notify(context.Context, Order) error { return nil }

// Claim mode, for effects outside the database (a message, an HTTP call):
// Fetch claims a batch of the item's pending rows, the function runs per row,
// and each row is marked done after it. Delivery is at least once: a row
// whose claimer dies before its done mark runs again on the item's next
// owner, after Lease at the latest.
func ExampleSource_Claim() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, "postgres://app@db:5432/shop", 0)
	if err != nil {
		log.Fatal(err) // names host:port; bounded by the connect timeout
	}
	defer pool.Close()
	spec := postgres.TableSpec{Table: "orders", Key: "id", Columns: []string{"id", "payload"}}
	if err := postgres.Migrate(ctx, pool, spec); err != nil { // adds the shardflow_* columns
		log.Fatal(err)
	}
	src, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec, Lease: 5 * time.Minute, MaxAttempts: 3})
	if err != nil {
		log.Fatal(err) // names the missing table, column or field
	}
	job := src.Claim(func(ctx context.Context, s dataflow.Shard, o Order) error {
		return notify(ctx, o) // an error counts an attempt; after MaxAttempts the row is 'failed'
	})
	node := newNode(ctx)
	cfg := dataflow.JobConfig{JobName: "notify", Cron: "0/5 * * * * ?", ShardingTotalCount: 8,
		FetchDataCount: 100, StreamingProcess: true, Failover: true}
	if err := dataflow.AddBatchJob[postgres.Row[Order]](ctx, node, cfg, job); err != nil {
		log.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Stop(ctx)
}

// Transactional mode, for effects in the same database: each batch's
// effects (rows of settlements, COPYed with the batch's transaction) commit
// together with the orders' done marks and the fence, so they happen exactly
// once, whichever replica crashes or is cut off.
func ExampleSource_Transactional() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, "postgres://app@db:5432/shop", 0)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	spec := postgres.TableSpec{Table: "orders", Key: "id", Columns: []string{"id", "payload"}}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		log.Fatal(err)
	}
	src, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec})
	if err != nil {
		log.Fatal(err)
	}
	job := src.Transactional(func(ctx context.Context, tx pgx.Tx, s dataflow.Shard, orders []Order) error {
		rows := make([][]any, len(orders))
		for i, o := range orders {
			rows[i] = []any{o.ID, s.Epoch}
		}
		_, err := pgsink.CopyAppend(ctx, tx, pgsink.Target{Table: "settlements", Columns: []string{"order_id", "epoch"}}, pgx.CopyFromRows(rows))
		return err
	})
	node := newNode(ctx)
	cfg := dataflow.JobConfig{JobName: "settle", Cron: "0/5 * * * * ?", ShardingTotalCount: 8,
		FetchDataCount: 500, StreamingProcess: true, Failover: true}
	if err := dataflow.AddBatchJob[postgres.Row[Order]](ctx, node, cfg, job); err != nil {
		log.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Stop(ctx)
}

// Checkpoint mode, for a table whose rows the job must not update (an
// append-only event log): Migrate adds only the bucket column, generated
// from the key, and its index; each bucket's position is kept in
// shardflow_checkpoint and advances in the transaction of the batch's
// writes, so those happen exactly once.
func ExampleSource_Checkpoint() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, "postgres://app@db:5432/shop", 0)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	spec := postgres.TableSpec{Table: "order_events", Key: "id", Columns: []string{"id", "payload"}, ReadOnly: true}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		log.Fatal(err)
	}
	src, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec})
	if err != nil {
		log.Fatal(err)
	}
	job := src.Checkpoint(func(ctx context.Context, tx pgx.Tx, s dataflow.Shard, events []Order) error {
		rows := make([][]any, len(events))
		for i, e := range events {
			rows[i] = []any{e.ID, len(e.Payload)}
		}
		_, err := pgsink.CopyUpsert(ctx, tx, pgsink.Target{Table: "event_sizes", Columns: []string{"event_id", "size"},
			ConflictColumns: []string{"event_id"}, UpdateColumns: []string{"size"}}, pgx.CopyFromRows(rows))
		return err
	})
	node := newNode(ctx)
	cfg := dataflow.JobConfig{JobName: "sizes", Cron: "0/5 * * * * ?", ShardingTotalCount: 8,
		FetchDataCount: 500, StreamingProcess: true, Failover: true}
	if err := dataflow.AddBatchJob[postgres.Row[Order]](ctx, node, cfg, job); err != nil {
		log.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Stop(ctx)
}

// A source refuses a config it cannot work with before touching the
// database, naming the field and the fix.
func ExampleNewSource_missingPool() {
	spec := postgres.TableSpec{Table: "orders", Key: "id", Columns: []string{"id", "payload"}}
	_, err := postgres.NewSource[Order](context.Background(), postgres.Config{Table: spec})
	fmt.Println(err)
	fmt.Println(errors.Is(err, postgres.ErrConfig))
	// Output:
	// sources/postgres: invalid configuration: Config.Pool is nil; open one with postgres.Connect
	// true
}

// Whose fault is an error of the job's function: the row's (an attempt is
// counted, the row fails after MaxAttempts) or the statement's and the
// infrastructure's (no attempt; the item backs off and retries). The job's
// code can say otherwise with dataflow.Permanent and dataflow.RetryAfter.
func ExampleClassify() {
	uniqueViolation := &pgconn.PgError{Code: "23505"}
	undefinedTable := &pgconn.PgError{Code: "42P01"}
	fmt.Println(postgres.Classify(uniqueViolation))
	fmt.Println(postgres.Classify(undefinedTable))
	fmt.Println(postgres.Classify(errors.New("card declined")))
	fmt.Println(postgres.Classify(io.EOF))
	fmt.Println(postgres.Classify(dataflow.Permanent(context.DeadlineExceeded)))
	fmt.Println(postgres.Classify(dataflow.RetryAfter(errors.New("rate limited"), time.Minute)))
	// Output:
	// row
	// statement
	// row
	// statement
	// row
	// statement
}

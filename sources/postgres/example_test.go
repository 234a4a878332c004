package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sinks/pgsink"
	"github.com/shardflow/shardflow/sources/postgres"
)

// A transactional job over table orders: each batch's effects (rows of
// settlements, COPYed with the batch's transaction) commit together with
// the orders' done marks and the fence, so they happen exactly once.
func Example_transactional() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, "postgres://app@db:5432/shop", 0)
	if err != nil {
		log.Fatal(err) // names host:port; bounded by the connect timeout
	}
	defer pool.Close()
	spec := postgres.TableSpec{Table: "orders", Key: "id", Columns: []string{"id", "payload"}}
	if err := postgres.Migrate(ctx, pool, spec); err != nil {
		log.Fatal(err)
	}
	src, err := postgres.NewSource[Order](ctx, postgres.Config{Pool: pool, Table: spec})
	if err != nil {
		log.Fatal(err) // names the missing table, column or field
	}
	job := src.Transactional(func(ctx context.Context, tx pgx.Tx, s dataflow.Shard, orders []Order) error {
		rows := make([][]any, len(orders))
		for i, o := range orders {
			rows[i] = []any{o.ID, s.Epoch}
		}
		_, err := pgsink.CopyAppend(ctx, tx, pgsink.Target{Table: "settlements", Columns: []string{"order_id", "epoch"}}, pgx.CopyFromRows(rows))
		return err
	})
	// Every replica joins the same ZooKeeper ensemble: it decides which
	// replica owns which of the 8 items.
	zk, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{"zk-0:2181", "zk-1:2181", "zk-2:2181"}})
	if err != nil {
		log.Fatal(err) // names the servers it could not reach
	}
	defer zk.Close()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: zk, ServerID: "pod-1"})
	if err != nil {
		log.Fatal(err)
	}
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

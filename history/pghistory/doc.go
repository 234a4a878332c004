// Package pghistory stores shardflow's execution history in Postgres: one
// row per shard item run, written in batches with COPY by a history.Buffer,
// pruned after a retention period, and read back newest first or "who owned
// each item at that instant" (the queries behind `shardflow history`).
//
//	store, err := pghistory.New(pghistory.Config{Pool: pool})
//	err = store.Migrate(ctx)                       // the table and its indexes
//	buf, err := history.NewBuffer(history.BufferConfig{Writer: store})
//	err = buf.Start(ctx)
//	node, err := dataflow.NewNode(dataflow.NodeConfig{..., History: buf})
//	...
//	node.Stop(ctx); buf.Stop(ctx)                  // the Node first: its last runs are recorded
//
// NewBuffer does the middle three steps.
package pghistory

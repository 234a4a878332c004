package pghistory_test

import (
	"sync"
	"testing"

	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

// Every worker of a fleet calls Migrate at start; replicas start at the same
// instant. Unserialized, concurrent CREATE TABLE IF NOT EXISTS fails on
// pg_type's unique index (seen in examples/pgbatch's fault test).
func TestMigrateConcurrent(t *testing.T) {
	pool := newPool(t, integration.SharedPostgres(t))
	const n = 8
	for round := range 5 {
		st, err := pghistory.New(pghistory.Config{Pool: pool, Table: "race_" + string(rune('a'+round))})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				<-start
				errs <- st.Migrate(t.Context())
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent Migrate: %v", round, err)
			}
		}
	}
}

package pghistory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// newPool connects to a fresh database of pg, closed at the test's end.
func newPool(t *testing.T, pg *integration.Postgres) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newStore(t *testing.T, cfg pghistory.Config) *pghistory.Store {
	t.Helper()
	st, err := pghistory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

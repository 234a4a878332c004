package connect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

func TestDescribeAndKind(t *testing.T) {
	for _, c := range []struct {
		coord string
		pg    bool
		desc  string
	}{
		{"zk1:2181,zk2:2181", false, "ZooKeeper zk1:2181,zk2:2181"},
		{"postgres://u:secret@db:5432/app?sslmode=disable", true, "Postgres db:5432/app"},
		{"PostgreSQL://u@db/app", true, "Postgres db/app"},
	} {
		if got := connect.IsPostgres(c.coord); got != c.pg {
			t.Errorf("IsPostgres(%q) = %v, want %v", c.coord, got, c.pg)
		}
		if got := connect.Describe(c.coord); got != c.desc || strings.Contains(got, "secret") {
			t.Errorf("Describe(%q) = %q, want %q", c.coord, got, c.desc)
		}
	}
}

func TestOpenRefusesBadSettings(t *testing.T) {
	ctx := context.Background()
	for _, c := range []connect.Config{
		{},
		{Coord: "etcd://host:2379"},
		{Coord: "postgres://u@h/db", Auth: "u:p"},
	} {
		if _, err := connect.Open(ctx, c); !errors.Is(err, connect.ErrInvalidConfig) {
			t.Errorf("Open(%+v): %v, want ErrInvalidConfig", c, err)
		}
	}
}

// TestOpenPicksTheStore opens both real stores from their one string.
func TestOpenPicksTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := integration.SharedPostgres(t)
	st, err := connect.Open(ctx, connect.Config{Coord: pg.DSN(), Schema: "connect_test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*pgstore.Store); !ok {
		t.Errorf("Open(%s) = %T, want *pgstore.Store", connect.Describe(pg.DSN()), st)
	}
	_ = st.Close()
	zk := integration.SharedZooKeeper(t)
	st, err = connect.Open(ctx, connect.Config{Coord: strings.Join(zk.Servers(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*zkstore.Store); !ok {
		t.Errorf("Open(zk) = %T, want *zkstore.Store", st)
	}
	_ = st.Close()
}

package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/memstore"
)

// TestCoordSelectsTheStore: --coord and SHARDFLOW_COORD name the store for
// every command that connects (a ZooKeeper list or a Postgres URL, passed
// whole), win over --zk, and --zk alone still works.
func TestCoordSelectsTheStore(t *testing.T) {
	srv := memstore.NewServer()
	asked := useMemstore(t, srv)
	startNode(t, srv, "shardflow", "J", 2)
	const dsn = "postgres://u:p@db:5432/app?sslmode=disable"
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want []string
	}{
		{"--coord URL", "", []string{"--coord", dsn}, []string{dsn}},
		{"--coord URL with commas kept whole", "", []string{"--coord", "postgres://u@h1,h2/app"}, []string{"postgres://u@h1,h2/app"}},
		{"--coord ZooKeeper list", "", []string{"--coord", "zk1:2181, zk2:2181"}, []string{"zk1:2181", "zk2:2181"}},
		{"--coord wins over --zk", "", []string{"--zk", "zk:1", "--coord", dsn}, []string{dsn}},
		{"--zk alone", "", []string{"--zk", "zk:1"}, []string{"zk:1"}},
		{"SHARDFLOW_COORD", dsn, nil, []string{dsn}},
		{"--coord flag over SHARDFLOW_COORD", dsn, []string{"--coord", "zk:9"}, []string{"zk:9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cli.EnvCoord, tc.env)
			t.Setenv(cli.EnvZooKeeper, "")
			_, errOut, code := runCLI(t, append([]string{"status", "--json"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("status %v: exit %d: %s", tc.args, code, errOut)
			}
			if !reflect.DeepEqual(*asked, tc.want) {
				t.Fatalf("status %v connected to %q, want %q", tc.args, *asked, tc.want)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		t.Setenv(cli.EnvCoord, "")
		t.Setenv(cli.EnvZooKeeper, "")
		_, errOut, code := runCLI(t, "status")
		if code == 0 || !strings.Contains(errOut, "--coord is required") {
			t.Fatalf("status without a store: exit %d: %s; want a refusal naming --coord", code, errOut)
		}
	})
}

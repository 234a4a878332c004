package protocol

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
)

// One config on its way in (issue 28 item 3): Join validates and encodes
// the local config once, and a join whose config is the one stored (a new
// job, or Overwrite) runs on it as given, never decoding what it wrote; a
// stored config that wins is decoded once (by the join's plan, not again
// after it). Before, every join decoded the stored fields after its
// transaction (a new job's: 1 decode), and a join the stored config won
// decoded them twice.
func TestJoinDecodesOnlyAStoredConfigThatWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		join := func(id string, cfg jobconfig.Config) *Job {
			t.Helper()
			st := srv.Connect()
			reg, err := NewRegistry(st, RegistryConfig{Namespace: "ns", ServerID: id, HostName: "h", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = reg.Close(context.Background())
				_ = st.Close()
			})
			j, err := reg.Join(t.Context(), cfg)
			if err != nil {
				t.Fatalf("server %s: Join: %v", id, err)
			}
			return j
		}
		cfg := jobconfig.Config{JobName: "job", Cron: "0/5 * * * * ?", ShardingTotalCount: 4, Description: "first"}

		a := join("a", cfg)
		if n := a.nodes.ConfigDecodes(); n != 0 {
			t.Errorf("a new job's join decoded its config %d times, want 0 (it runs on the config it wrote)", n)
		}
		if got, want := a.Config(), cfg.WithDefaults(); !reflect.DeepEqual(got, want) {
			t.Errorf("a new job's Config %+v, want the local config with defaults %+v", got, want)
		}

		second := cfg
		second.Description = "second"
		b := join("b", second)
		if n := b.nodes.ConfigDecodes(); n != 1 {
			t.Errorf("a join the stored config won decoded it %d times, want 1", n)
		}
		if got := b.Config().Description; got != "first" {
			t.Errorf("a join the stored config won runs on description %q, want the stored %q", got, "first")
		}
		synctest.Wait()
		before := a.nodes.ConfigDecodes()

		third := cfg
		third.Description, third.Overwrite = "third", true
		c := join("c", third)
		if n := c.nodes.ConfigDecodes(); n != 0 {
			t.Errorf("an overwriting join decoded its config %d times, want 0", n)
		}
		if got := c.Config().Description; got != "third" {
			t.Errorf("an overwriting join runs on description %q, want its own %q", got, "third")
		}
		synctest.Wait()
		// The others' watchers decode the overwritten config once each;
		// the writer's own watcher does not decode it back.
		if n := c.nodes.ConfigDecodes(); n != 0 {
			t.Errorf("the overwriting server's watcher decoded its own config %d times, want 0", n)
		}
		if n := a.nodes.ConfigDecodes() - before; n != 1 {
			t.Errorf("another server's watcher decoded the overwritten config %d times, want 1", n)
		}
		if got := a.Config().Description; got != "third" {
			t.Errorf("another server runs on description %q after the overwrite, want %q", got, "third")
		}
	})
}

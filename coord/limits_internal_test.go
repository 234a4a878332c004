package coord

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// TestCreateJobRefusedAtLimit: CreateJob refuses a job beyond the
// namespace's limit, naming it (there was none before).
func TestCreateJobRefusedAtLimit(t *testing.T) {
	prev := maxStoredJobs
	maxStoredJobs = 2
	t.Cleanup(func() { maxStoredJobs = prev })
	srv := memstore.NewServer()
	st := srv.Connect()
	defer st.Close()
	a := NewAdmin(st, "lim")
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if err := a.CreateJob(ctx, jobconfig.Config{JobName: name, ShardingTotalCount: 1, JobType: jobconfig.JobTypeScript, Script: jobconfig.ScriptSettings{CommandLine: "/bin/true"}}); err != nil {
			t.Fatal(err)
		}
	}
	err := a.CreateJob(ctx, jobconfig.Config{JobName: "c", ShardingTotalCount: 1, JobType: jobconfig.JobTypeScript, Script: jobconfig.ScriptSettings{CommandLine: "/bin/true"}})
	if !errors.Is(err, ErrTooManyJobs) || !strings.Contains(err.Error(), "MaxStoredJobs") {
		t.Errorf("third job: %v, want ErrTooManyJobs naming the limit", err)
	}
}

// TestStatusOfOversizedStoredJob: a shardingTotalCount of 20,000,000
// written straight into the store reads as a config error naming the
// limit, and status lists no items for it (it listed all 20,000,000
// before, gigabytes for the console).
func TestStatusOfOversizedStoredJob(t *testing.T) {
	srv := memstore.NewServer()
	st := srv.Connect()
	defer st.Close()
	a := NewAdmin(st, "big")
	ctx := context.Background()
	if err := a.CreateJob(ctx, jobconfig.Config{JobName: "j", ShardingTotalCount: 2, JobType: jobconfig.JobTypeScript, Script: jobconfig.ScriptSettings{CommandLine: "/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Set(ctx, store.Join("big", "j", "config", jobconfig.FieldShardingTotalCount), []byte("20000000"), -1); err != nil {
		t.Fatal(err)
	}
	s, err := a.Status(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.ConfigError, "limit of 10000") || len(s.Items) != 0 {
		t.Errorf("status: config error %q, %d items", s.ConfigError, len(s.Items))
	}
}

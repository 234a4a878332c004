package coord_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
)

// An operator's program: store a job without code, act on it, and read
// its status and audit log. Any store session will do (ZooKeeper and
// Postgres through coord/connect); this one is the embedded store, with no
// server running the job yet.
func ExampleAdmin() {
	ctx := context.Background()
	st := memstore.NewServer().Connect()
	defer st.Close()
	admin := coord.NewAdmin(st, "").As("alice")

	err := admin.CreateJob(ctx, jobconfig.Config{
		JobName:            "nightly",
		ShardingTotalCount: 4,
		JobType:            jobconfig.JobTypeScript,
		Script:             jobconfig.ScriptSettings{CommandLine: "/opt/jobs/nightly --item"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Each action is checked against the stored job first.
	fmt.Println(errors.Is(admin.Pause(ctx, "nightly", "web-1"), coord.ErrNoServer))
	fmt.Println(errors.Is(admin.DisableItem(ctx, "nightly", 7), coord.ErrNoItem))
	if err := admin.DisableItem(ctx, "nightly", 3); err != nil {
		fmt.Println(err)
		return
	}
	if err := admin.SetConfig(ctx, "nightly", jobconfig.FieldCron, "0 0 2 * * ?"); err != nil {
		fmt.Println(err)
		return
	}

	status, err := admin.Status(ctx, "nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("health:", status.Health, status.HealthReasons)
	fmt.Println("items:", len(status.Items), "item 3 disabled:", status.Items[3].Disabled)
	for _, act := range status.Actions { // newest first
		line := act.Actor + ": " + act.Action
		if act.Item != nil {
			line += fmt.Sprintf(" item %d", *act.Item)
		}
		if act.Field != "" {
			line += fmt.Sprintf(" %s=%q", act.Field, act.Value)
		}
		if act.Detail != "" {
			line += " (" + act.Detail + ")"
		}
		fmt.Println(line)
	}
	// Output:
	// true
	// true
	// health: degraded [no server is online: no item runs]
	// items: 4 item 3 disabled: true
	// alice: config set cron="0 0 2 * * ?"
	// alice: disable item 3
	// alice: create (SCRIPT job, 4 items, run on trigger only, command "/opt/jobs/nightly --item")
}

package dataflow

import (
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestNodeFiresInJobTimeZone: the scheduler evaluates cron in the job's
// timeZone, and a live timeZone edit reschedules.
func TestNodeFiresInJobTimeZone(t *testing.T) {
	srv := memstore.NewServer()
	nodes, _ := cluster(t, srv, "tz", 1)
	n := nodes[0]
	defer stopNode(t, n)
	cfg := JobConfig{JobName: "noon", ShardingTotalCount: 1, Cron: "0 0 12 * * ?", TimeZone: "Asia/Tokyo"}
	if err := AddJob(t.Context(), n, cfg, Job[int](&itemJob{})); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Tokyo has no daylight saving: noon there is 03:00 UTC.
	if next := n.NextFireTime("noon").UTC(); next.Hour() != 3 || next.Minute() != 0 {
		t.Fatalf("next fire %v, want 03:00 UTC (noon in Tokyo)", next)
	}

	adminSess := srv.Connect()
	defer adminSess.Close()
	admin := coord.NewAdmin(adminSess, "tz")
	if err := admin.SetConfig(t.Context(), "noon", jobconfig.FieldTimeZone, "GMT-05:00"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the job rescheduled at noon GMT-5 (17:00 UTC)", func() bool {
		return n.NextFireTime("noon").UTC().Hour() == 17
	})
}

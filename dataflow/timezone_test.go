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

// TestRunInfoScheduledFire: a cron run carries the fire time it serves (on
// the cron's grid, not after its start); a triggered run carries none.
func TestRunInfoScheduledFire(t *testing.T) {
	srv := memstore.NewServer()
	nodes, _ := cluster(t, srv, "fire", 1)
	n := nodes[0]
	defer stopNode(t, n)
	l := newAfterListener()
	cfg := JobConfig{JobName: "every2s", ShardingTotalCount: 1, Cron: "0/2 * * * * ?"}
	if err := AddJob(t.Context(), n, cfg, Job[int](&itemJob{}), WithListeners(l)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("every2s"); err != nil {
		t.Fatal(err)
	}
	sawCron, sawTrigger := false, false
	for !sawCron || !sawTrigger {
		var info RunInfo
		select {
		case info = <-l.before:
		case <-time.After(30 * time.Second):
			t.Fatalf("waited 30s for a cron and a triggered run (cron %v, trigger %v)", sawCron, sawTrigger)
		}
		<-l.runs
		switch info.Reason {
		case ReasonCron:
			sawCron = true
			at := info.ScheduledFire
			if at.IsZero() || at.Nanosecond() != 0 || at.Second()%2 != 0 || at.After(info.Started) {
				t.Fatalf("cron run: ScheduledFire %v (Started %v), want an even second at or before the start", at, info.Started)
			}
		case ReasonTrigger:
			sawTrigger = true
			if !info.ScheduledFire.IsZero() {
				t.Fatalf("triggered run: ScheduledFire %v, want zero", info.ScheduledFire)
			}
		}
	}
}

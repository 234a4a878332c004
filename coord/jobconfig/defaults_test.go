package jobconfig

import (
	"runtime"
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	got := Config{JobName: "j", ShardingTotalCount: 3}.WithDefaults()
	if got.ProcessCountInterval != 5*time.Minute ||
		got.ConcurrentDataProcessThreadCount != 2*runtime.GOMAXPROCS(0) ||
		got.FetchDataCount != 1 ||
		got.ShardingStrategy != "average" ||
		got.ErrorPolicy != ErrorPolicyLog ||
		got.ReconcileInterval != time.Minute ||
		!got.MonitorsExecution() || !got.MisfireEnabled() {
		t.Fatalf("WithDefaults() = %+v", got)
	}
	if got.MaxTimeDiff != 0 || got.Failover || got.StreamingProcess || got.Cron != "" {
		t.Errorf("WithDefaults set fields without defaults: %+v", got)
	}
}

func TestWithDefaultsKeepsSetValues(t *testing.T) {
	in := Config{
		ProcessCountInterval: 5 * time.Second, ConcurrentDataProcessThreadCount: -1, FetchDataCount: 10,
		ShardingStrategy: "odd-even", ErrorPolicy: ErrorPolicyIgnore, ReconcileInterval: 7 * time.Second,
		DisableMonitorExecution: true, DisableMisfire: true,
	}
	got := in.WithDefaults()
	if got.ProcessCountInterval != 5*time.Second || got.ConcurrentDataProcessThreadCount != -1 ||
		got.FetchDataCount != 10 || got.ShardingStrategy != "odd-even" || got.ErrorPolicy != ErrorPolicyIgnore ||
		got.ReconcileInterval != 7*time.Second || got.MonitorsExecution() || got.MisfireEnabled() {
		t.Fatalf("WithDefaults changed set values: %+v", got)
	}
}

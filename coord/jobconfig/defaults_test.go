package jobconfig

import (
	"runtime"
	"testing"
)

func TestWithDefaults(t *testing.T) {
	got := Config{JobName: "j", ShardingTotalCount: 3}.WithDefaults()
	if got.ProcessCountIntervalSeconds != 300 ||
		got.ConcurrentDataProcessThreadCount != 2*runtime.GOMAXPROCS(0) ||
		got.FetchDataCount != 1 ||
		got.ShardingStrategy != "average" ||
		got.ErrorPolicy != ErrorPolicyLog ||
		got.ReconcileIntervalSeconds != 60 ||
		got.MonitorExecution == nil || !*got.MonitorExecution ||
		got.Misfire == nil || !*got.Misfire {
		t.Fatalf("WithDefaults() = %+v", got)
	}
	if got.MaxTimeDiffSeconds != 0 || got.Failover || got.StreamingProcess || got.Cron != "" {
		t.Errorf("WithDefaults set fields without defaults: %+v", got)
	}
}

func TestWithDefaultsKeepsSetValues(t *testing.T) {
	in := Config{
		ProcessCountIntervalSeconds: 5, ConcurrentDataProcessThreadCount: -1, FetchDataCount: 10,
		ShardingStrategy: "odd-even", ErrorPolicy: ErrorPolicyIgnore, ReconcileIntervalSeconds: 7,
		MonitorExecution: Bool(false), Misfire: Bool(false),
	}
	got := in.WithDefaults()
	if got.ProcessCountIntervalSeconds != 5 || got.ConcurrentDataProcessThreadCount != -1 ||
		got.FetchDataCount != 10 || got.ShardingStrategy != "odd-even" || got.ErrorPolicy != ErrorPolicyIgnore ||
		got.ReconcileIntervalSeconds != 7 || *got.MonitorExecution || *got.Misfire {
		t.Fatalf("WithDefaults changed set values: %+v", got)
	}
	*got.Misfire = true
	if *in.Misfire {
		t.Error("WithDefaults shares the Misfire pointer with its receiver")
	}
}

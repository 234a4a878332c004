package jobconfig

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFieldsNames(t *testing.T) {
	want := []string{
		"concurrentDataProcessThreadCount", "cron", "dependsOn", "description", "disabled", "errorPolicy",
		"failover", "fetchDataCount", "httpHeaders", "httpMethod", "httpUrl", "itemTimeout",
		"jobParameter", "jobShardingStrategy", "maxTimeDiffSeconds",
		"misfire", "monitorExecution", "overwrite", "pipelinedFetch", "processCountIntervalSeconds",
		"reconcileIntervalSeconds", "scriptCommandLine", "shardingItemParameters", "shardingTotalCount", "streamingProcess",
		"timeZone", "upstreamFailure",
	}
	if got := FieldNames(); !slices.Equal(got, want) {
		t.Fatalf("FieldNames() = %v, want %v", got, want)
	}
	m := Config{}.Fields()
	if len(m) != len(want)+1 || m["jobType"] != "DATAFLOW" {
		t.Errorf("Fields() = %v, want every field plus jobType=DATAFLOW", m)
	}
}

func TestFieldsEncoding(t *testing.T) {
	c := Config{
		JobName: "j", Cron: "0 * * * * ?", ShardingTotalCount: 4, ShardingItemParameters: "0=a",
		JobParameter: "p", DisableMonitorExecution: true, ProcessCountInterval: 10 * time.Second,
		FetchDataCount: 100, StreamingProcess: true, PipelinedFetch: true, MaxTimeDiff: -time.Second, Failover: true,
		Description: " d ", Overwrite: true, ShardingStrategy: "odd-even", Disabled: true,
		ErrorPolicy: ErrorPolicyReturn, JobType: JobTypeDataflow, ItemTimeout: 90 * time.Second,
		TimeZone: "Asia/Shanghai",
	}
	want := map[string]string{
		"cron": "0 * * * * ?", "shardingTotalCount": "4", "shardingItemParameters": "0=a",
		"jobParameter": "p", "monitorExecution": "false", "processCountIntervalSeconds": "10",
		"concurrentDataProcessThreadCount": "0", "fetchDataCount": "100", "streamingProcess": "true",
		"pipelinedFetch":     "true",
		"maxTimeDiffSeconds": "-1", "failover": "true", "misfire": "true", "description": " d ",
		"overwrite": "true", "jobShardingStrategy": "odd-even", "disabled": "true",
		"errorPolicy": "return", "reconcileIntervalSeconds": "0", "jobType": "DATAFLOW",
		"scriptCommandLine": "", "httpUrl": "", "httpMethod": "", "httpHeaders": "", "itemTimeout": "1m30s",
		"timeZone": "Asia/Shanghai", "dependsOn": "", "upstreamFailure": "",
	}
	if got := c.Fields(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Fields() =\n%v\nwant\n%v", got, want)
	}
	back, err := FromFields("j", want)
	if err != nil {
		t.Fatalf("FromFields: %v", err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("FromFields(Fields()) = %+v, want %+v", back, c)
	}
}

func TestFromFieldsDefaultsAndUnknown(t *testing.T) {
	c, err := FromFields("j", map[string]string{"shardingTotalCount": " 3 ", "someFutureField": "x", "failover": "TRUE"})
	if err != nil {
		t.Fatalf("FromFields: %v", err)
	}
	want := Config{JobName: "j", ShardingTotalCount: 3, Failover: true, JobType: JobTypeDataflow}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("FromFields = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("decoded config does not validate: %v", err)
	}
}

func TestFromFieldsErrors(t *testing.T) {
	_, err := FromFields("order-sync", map[string]string{
		"shardingTotalCount": "abc", "failover": "yes", "fetchDataCount": "1e3", "jobType": "BATCH",
	})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("FromFields error = %v, want ErrInvalid", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`jobconfig: config/shardingTotalCount: stored value "abc" is not an integer; set it with ` + "`shardflow config set --job order-sync shardingTotalCount 8`",
		`config/failover: stored value "yes" is not true or false`,
		`config/fetchDataCount: stored value "1e3" is not an integer`,
		`config/jobType: job "order-sync" is registered as a "BATCH" job, which is not one of DATAFLOW, SIMPLE, SCRIPT, HTTP`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if n := len(FieldErrors(err)); n != 4 {
		t.Errorf("got %d field errors, want 4", n)
	}
}

func TestSetField(t *testing.T) {
	base := valid()
	c, err := SetField(base, "shardingTotalCount", "8")
	if err != nil || c.ShardingTotalCount != 8 || base.ShardingTotalCount != 3 {
		t.Fatalf("SetField total = %d, %v (base %d)", c.ShardingTotalCount, err, base.ShardingTotalCount)
	}
	c, err = SetField(base, "misfire", "false")
	if err != nil || !c.DisableMisfire || base.DisableMisfire {
		t.Fatalf("SetField misfire false = DisableMisfire %v, %v", c.DisableMisfire, err)
	}
	if c, err = SetField(c, "monitorExecution", "false"); err != nil || !c.DisableMonitorExecution {
		t.Fatalf("SetField monitorExecution false = DisableMonitorExecution %v, %v", c.DisableMonitorExecution, err)
	}
	if c, err = SetField(base, "processCountIntervalSeconds", "42"); err != nil || c.ProcessCountInterval != 42*time.Second {
		t.Fatalf("SetField processCountIntervalSeconds 42 = %s, %v", c.ProcessCountInterval, err)
	}
	if c, err = SetField(base, "cron", ""); err != nil || c.Cron != "" {
		t.Fatalf("SetField clearing cron: %v", err)
	}

	errTests := []struct {
		name, value, field, phrase string
	}{
		{"nope", "1", "nope", "is not a config field"},
		{"jobType", "SIMPLE", "jobType", "fixed when the job is first stored (it is DATAFLOW)"},
		{"itemTimeout", "soon", "itemTimeout", `"soon" is not a duration`},
		{"itemTimeout", "-1s", "itemTimeout", "must be >= 0"},
		{"shardingTotalCount", "many", "shardingTotalCount", `"many" is not an integer`},
		{"failover", "maybe", "failover", `"maybe" is not true or false`},
		{"cron", "0 0 0 L * MON", "cron", "both day-of-month and day-of-week are set"},
		{"timeZone", "Mars/Olympus", "timeZone", `"Mars/Olympus" is not a time zone`},
		{"shardingTotalCount", "2", "shardingItemParameters", "not below shardingTotalCount 2"},
		{"errorPolicy", "throw", "errorPolicy", `"throw"`},
	}
	for _, tt := range errTests {
		got, err := SetField(base, tt.name, tt.value)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.phrase) || !strings.Contains(err.Error(), tt.field+":") {
			t.Errorf("SetField(%s, %q) error = %v, want one naming %s with %q", tt.name, tt.value, err, tt.field, tt.phrase)
		}
		if !reflect.DeepEqual(got, base) {
			t.Errorf("SetField(%s, %q) changed the config on error", tt.name, tt.value)
		}
	}
}

func TestSetFieldRepairsOneFieldAtATime(t *testing.T) {
	broken := Config{JobName: "j", ShardingTotalCount: 0, ErrorPolicy: "throw"}
	c, err := SetField(broken, "shardingTotalCount", "4")
	if err != nil {
		t.Fatalf("fixing one field of two broken ones: %v", err)
	}
	c, err = SetField(c, "errorPolicy", "log")
	if err != nil {
		t.Fatalf("fixing the second field: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("repaired config does not validate: %v", err)
	}
}

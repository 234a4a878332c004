package jobconfig

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func valid() Config {
	return Config{JobName: "order-sync", Cron: "0/5 * * * * ?", ShardingTotalCount: 3, ShardingItemParameters: "0=a,1=b,2=c"}
}

func TestValidateOK(t *testing.T) {
	cases := map[string]Config{
		"full":          valid(),
		"no cron":       {JobName: "a.b_c-1", ShardingTotalCount: 1},
		"max name":      {JobName: strings.Repeat("x", MaxJobNameLen), ShardingTotalCount: 1},
		"odd-even":      {JobName: "j", ShardingTotalCount: 1, ShardingStrategy: "odd-even"},
		"return policy": {JobName: "j", ShardingTotalCount: 1, ErrorPolicy: ErrorPolicyReturn},
		"negative skew": {JobName: "j", ShardingTotalCount: 1, MaxTimeDiff: -time.Second},
	}
	for name, c := range cases {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Config)
		field  string
		phrase string // a piece of the message
	}{
		{"empty name", func(c *Config) { c.JobName = "" }, "jobName", "is empty"},
		{"slash in name", func(c *Config) { c.JobName = "a/b" }, "jobName", "'/'"},
		{"dot-dot name", func(c *Config) { c.JobName = ".." }, "jobName", "relative"},
		{"long name", func(c *Config) { c.JobName = strings.Repeat("x", MaxJobNameLen+1) }, "jobName", "over 128"},
		{"zero total", func(c *Config) { c.ShardingTotalCount = 0; c.ShardingItemParameters = "" }, "shardingTotalCount", "must be > 0, got 0"},
		{"negative total", func(c *Config) { c.ShardingTotalCount = -2; c.ShardingItemParameters = "" }, "shardingTotalCount", "got -2"},
		{"bad cron", func(c *Config) { c.Cron = "every day" }, "cron", "fields"},
		{"bad item params", func(c *Config) { c.ShardingItemParameters = "0=a=b" }, "shardingItemParameters", "exactly item=value"},
		{"item beyond total", func(c *Config) { c.ShardingItemParameters = "3=x" }, "shardingItemParameters", "not below shardingTotalCount 3"},
		{"negative interval", func(c *Config) { c.ProcessCountInterval = -time.Second }, "processCountIntervalSeconds", "got -1s"},
		{"sub-second interval", func(c *Config) { c.ProcessCountInterval = time.Millisecond }, "processCountIntervalSeconds", "must be >= 1s"},
		{"fractional skew", func(c *Config) { c.MaxTimeDiff = 1500 * time.Millisecond }, "maxTimeDiffSeconds", "whole seconds, e.g. 2s"},
		{"negative threads", func(c *Config) { c.ConcurrentDataProcessThreadCount = -4 }, "concurrentDataProcessThreadCount", "got -4"},
		{"negative fetch", func(c *Config) { c.FetchDataCount = -1 }, "fetchDataCount", "got -1"},
		{"negative reconcile", func(c *Config) { c.ReconcileInterval = -time.Minute }, "reconcileIntervalSeconds", "got -1m0s"},
		{"unknown strategy", func(c *Config) { c.ShardingStrategy = "hash" }, "jobShardingStrategy", `"hash"`},
		{"unknown policy", func(c *Config) { c.ErrorPolicy = "throw" }, "errorPolicy", `"throw"`},
		// Sizes: the limit is named, so the operator knows what to aim for.
		{"huge total", func(c *Config) { c.ShardingTotalCount = 20_000_000 }, "shardingTotalCount", "over the limit of 10000"},
		{"huge job parameter", func(c *Config) { c.JobParameter = strings.Repeat("p", MaxParameterBytes+1) }, "jobParameter", "over the limit of 65536"},
		{"huge item parameters", func(c *Config) { c.ShardingItemParameters = "0=" + strings.Repeat("p", MaxParameterBytes) }, "shardingItemParameters", "MaxParameterBytes"},
		{"huge description", func(c *Config) { c.Description = strings.Repeat("d", MaxTextBytes+1) }, "description", "over the limit of 8192"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
			fes := FieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("Validate() gave %d field errors, want 1: %v", len(fes), err)
			}
			fe := fes[0]
			if fe.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", fe.Field, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.phrase) || !strings.Contains(err.Error(), tt.field+":") {
				t.Errorf("error %q lacks %q or the field name", err, tt.phrase)
			}
			if fe.Fix == "" {
				t.Errorf("error %q gives no fix", err)
			}
		})
	}
}

func TestValidateJoinsAllProblems(t *testing.T) {
	err := Config{ShardingTotalCount: -1, Cron: "x", FetchDataCount: -1, ErrorPolicy: "boom"}.Validate()
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	want := []string{"jobName", "shardingTotalCount", "cron", "fetchDataCount", "errorPolicy"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("fields = %v, want %v", got, want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "jobName" {
		t.Errorf("errors.As gives %v, want the jobName error first", fe)
	}
}

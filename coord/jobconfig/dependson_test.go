package jobconfig

import (
	"slices"
	"strings"
	"testing"
)

func TestDependsOnRoundTrip(t *testing.T) {
	c := Config{JobName: "load", ShardingTotalCount: 2, DependsOn: []string{"extract", "clean"}, UpstreamFailure: UpstreamFailureRun}
	f := c.Fields()
	if f[FieldDependsOn] != "extract,clean" || f[FieldUpstreamFailure] != "run" {
		t.Fatalf("Fields() dependsOn=%q upstreamFailure=%q, want \"extract,clean\" and \"run\"", f[FieldDependsOn], f[FieldUpstreamFailure])
	}
	back, err := FromFields("load", f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.DependsOn, c.DependsOn) || back.StopsOnUpstreamFailure() {
		t.Fatalf("FromFields: DependsOn %v stops %v, want %v and false", back.DependsOn, back.StopsOnUpstreamFailure(), c.DependsOn)
	}
	set, err := SetField(Config{JobName: "load", ShardingTotalCount: 2}, FieldDependsOn, " a , b,,")
	if err != nil || !slices.Equal(set.DependsOn, []string{"a", "b"}) {
		t.Fatalf("SetField(dependsOn) = %v, %v; want [a b]", set.DependsOn, err)
	}
	cleared, err := SetField(set, FieldDependsOn, "")
	if err != nil || cleared.DependsOn != nil {
		t.Fatalf("SetField(dependsOn, \"\") = %v, %v; want none", cleared.DependsOn, err)
	}
}

func TestDependsOnRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
		want  string
	}{
		{"itself", Config{DependsOn: []string{"b", "j"}}, FieldDependsOn, "names the job itself (j)"},
		{"twice", Config{DependsOn: []string{"b", "b"}}, FieldDependsOn, "names b twice"},
		{"bad name", Config{DependsOn: []string{"a/b"}}, FieldDependsOn, `"a/b" is not a job name`},
		{"with cron", Config{DependsOn: []string{"a"}, Cron: "0 * * * * ?"}, FieldCron, "a job runs either on a cron or after other jobs"},
		{"policy", Config{DependsOn: []string{"a"}, UpstreamFailure: "maybe"}, FieldUpstreamFailure, `"maybe" is not an upstream failure policy`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.JobName, tc.cfg.ShardingTotalCount = "j", 1
			fes := FieldErrors(tc.cfg.Validate())
			if len(fes) != 1 || fes[0].Field != tc.field || !strings.Contains(fes[0].Problem, tc.want) {
				t.Fatalf("Validate() = %v, want one error on %s saying %q", fes, tc.field, tc.want)
			}
		})
	}
	if err := (Config{JobName: "j", ShardingTotalCount: 1, DependsOn: []string{"a", "b"}}).Validate(); err != nil {
		t.Fatalf("a valid dependsOn refused: %v", err)
	}
}

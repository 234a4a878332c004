package jobconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestSplitCommandLine(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"/bin/echo hi", []string{"/bin/echo", "hi"}},
		{"  a\t b \n c  ", []string{"a", "b", "c"}},
		{`sh -c 'echo $HOME | wc -c'`, []string{"sh", "-c", "echo $HOME | wc -c"}},
		{`a "b c" d`, []string{"a", "b c", "d"}},
		{`a "x\"y\\z\n"`, []string{"a", `x"y\z\n`}},
		{`a\ b c`, []string{"a b", "c"}},
		{`a '' ""`, []string{"a", "", ""}},
		{`pre'fix'"ed"`, []string{"prefixed"}},
		{`$HOME *.txt`, []string{"$HOME", "*.txt"}}, // nothing expands
	}
	for _, tt := range tests {
		got, err := SplitCommandLine(tt.line)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitCommandLine(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	for _, bad := range []struct{ line, phrase string }{
		{"", "is empty"},
		{"   ", "is empty"},
		{"a 'b", "unterminated single quote"},
		{`a "b`, "unterminated double quote"},
		{`a \`, "lone backslash"},
	} {
		_, err := SplitCommandLine(bad.line)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.phrase) || !strings.Contains(err.Error(), "scriptCommandLine") {
			t.Errorf("SplitCommandLine(%q) error = %v, want one naming scriptCommandLine with %q", bad.line, err, bad.phrase)
		}
	}
}

func TestParseHTTPHeaders(t *testing.T) {
	h, err := ParseHTTPHeaders("Authorization: Bearer T\n\n x-team :  ops \nX-Team: dev")
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("Authorization") != "Bearer T" || !reflect.DeepEqual(h.Values("X-Team"), []string{"ops", "dev"}) {
		t.Errorf("headers = %v", h)
	}
	for _, bad := range []string{"no colon", "bad name: x", ": empty"} {
		if _, err := ParseHTTPHeaders(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "httpHeaders") {
			t.Errorf("ParseHTTPHeaders(%q) error = %v, want one naming httpHeaders", bad, err)
		}
	}
}

func TestValidateJobTypes(t *testing.T) {
	ok := []Config{
		{JobName: "s", ShardingTotalCount: 2, JobType: JobTypeSimple},
		{JobName: "s", ShardingTotalCount: 2, JobType: JobTypeScript, Script: ScriptSettings{CommandLine: "/bin/true"}},
		{JobName: "h", ShardingTotalCount: 2, JobType: JobTypeHTTP, HTTP: HTTPSettings{URL: "http://127.0.0.1:8080/run", Headers: "A: b"}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%s job: %v", c.JobType, err)
		}
	}
	if m := (Config{JobName: "h", JobType: JobTypeHTTP}).WithDefaults().HTTP.Method; m != "POST" {
		t.Errorf("HTTP job's default method = %q, want POST", m)
	}
	bad := []struct {
		cfg           Config
		field, phrase string
	}{
		{Config{JobType: "BATCH"}, "jobType", `"BATCH" is not a job type`},
		{Config{JobType: JobTypeScript}, "scriptCommandLine", "is empty"},
		{Config{JobType: JobTypeHTTP}, "httpUrl", "is empty"},
		{Config{JobType: JobTypeHTTP, HTTP: HTTPSettings{URL: "ftp://x/y"}}, "httpUrl", "not an absolute http"},
		{Config{JobType: JobTypeHTTP, HTTP: HTTPSettings{URL: "/relative"}}, "httpUrl", "not an absolute http"},
		{Config{JobType: JobTypeHTTP, HTTP: HTTPSettings{URL: "http://x", Method: "GE T"}}, "httpMethod", "not an HTTP method"},
		{Config{JobType: JobTypeSimple, StreamingProcess: true}, "streamingProcess", "SIMPLE job"},
		{Config{ItemTimeout: -1}, "itemTimeout", "must be >= 0"},
	}
	for _, tt := range bad {
		tt.cfg.JobName, tt.cfg.ShardingTotalCount = "j", 2
		err := tt.cfg.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.field+":") || !strings.Contains(err.Error(), tt.phrase) {
			t.Errorf("Validate(%+v) = %v, want %s: ...%s", tt.cfg, err, tt.field, tt.phrase)
		}
	}
}

func TestJobTypeRoundTrip(t *testing.T) {
	c := Config{JobName: "j", ShardingTotalCount: 2, JobType: JobTypeHTTP, HTTP: HTTPSettings{URL: "https://x/run",
		Method: "PUT", Headers: "A: b\nC: d"}, ItemTimeout: 1500 * 1e6}
	back, err := FromFields("j", c.Fields())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip = %+v, want %+v", back, c)
	}
	if got := c.Fields()["itemTimeout"]; got != "1.5s" {
		t.Errorf("itemTimeout stored as %q, want 1.5s", got)
	}
}

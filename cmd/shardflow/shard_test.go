package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestShardJSONMatchesReferenceExamples(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want map[string][]int
	}{
		{"average 3 servers 8 items", []string{"--strategy", "average", "--servers", "c,a,b", "--total", "8", "--job", "j"},
			map[string][]int{"a": {0, 1, 6}, "b": {2, 3, 7}, "c": {4, 5}}},
		{"average 3 servers 10 items", []string{"--servers", "a,b,c", "--total", "10"},
			map[string][]int{"a": {0, 1, 2, 9}, "b": {3, 4, 5}, "c": {6, 7, 8}}},
		{"more servers than items", []string{"--servers", "a,b,c", "--total", "2"},
			map[string][]int{"a": {0}, "b": {1}, "c": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"shard", "--json"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got map[string][]int
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestShardStrategiesAgreeWithPackage(t *testing.T) {
	// odd-even reverses the sorted list when hashCode(job) is even: "a" has
	// hashCode 97 (odd, no reversal), "b" has 98 (even, reversed).
	out, _, code := runCLI(t, "shard", "--json", "--strategy", "odd-even", "--servers", "x,y,z", "--total", "3", "--job", "b")
	if code != 0 {
		t.Fatal(out)
	}
	var got map[string][]int
	_ = json.Unmarshal([]byte(out), &got)
	if want := map[string][]int{"z": {0}, "y": {1}, "x": {2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("odd-even on job b: got %v, want %v", got, want)
	}
}

func TestShardBadInputNamesTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"shard", "--servers", "a", "--total", "0"}, "--total"},
		{[]string{"shard", "--servers", "", "--total", "3"}, "--servers"},
		{[]string{"shard", "--servers", "a", "--total", "3", "--strategy", "nope", "--job", "j"}, "nope"},
		{[]string{"shard", "--servers", "a", "--total", "3", "--strategy", "round-robin"}, "--job"},
		{[]string{"nosuchcommand"}, "unknown command"},
	}
	for _, tt := range tests {
		_, errOut, code := runCLI(t, tt.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tt.args, code)
		}
		if !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: stderr %q does not name %q", tt.args, errOut, tt.want)
		}
	}
}

func TestShardUsesJavaServerOrder(t *testing.T) {
	// Java's String.compareTo puts U+1F600 (surrogates 0xD83D 0xDE00) before
	// U+E000; Go's byte order would put it after.
	out, errOut, code := runCLI(t, "shard", "--json", "--servers", "\uE000,\U0001F600", "--total", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got map[string][]int
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if want := map[string][]int{"\U0001F600": {0, 2}, "\uE000": {1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	out, _, _ = runCLI(t, "shard", "--servers", "\uE000,\U0001F600", "--total", "3")
	if i, j := strings.Index(out, "\U0001F600"), strings.Index(out, "\uE000"); i < 0 || j < 0 || i > j {
		t.Fatalf("text output not in Java order:\n%s", out)
	}
}

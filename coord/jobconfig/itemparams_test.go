package jobconfig

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseItemParameters(t *testing.T) {
	tests := []struct {
		in    string
		total int
		want  map[int]string
		err   string // substring of the error, "" for success
	}{
		{"", 3, map[int]string{}, ""},
		{"   ", 3, map[int]string{}, ""},
		{"0=Beijing,1=Shanghai,2=Guangzhou", 3, map[int]string{0: "Beijing", 1: "Shanghai", 2: "Guangzhou"}, ""},
		{" 0 = a , 2= b c ", 3, map[int]string{0: "a", 2: "b c"}, ""},
		{"1=", 3, map[int]string{1: ""}, ""},
		{"0=a,", 3, map[int]string{0: "a"}, ""},
		{"0=a,,1=b", 3, map[int]string{0: "a", 1: "b"}, ""},
		{"5=x", 0, map[int]string{5: "x"}, ""}, // total <= 0: no bound check
		{"0=a=b", 3, nil, `"0=a=b" must be exactly item=value`},
		{"x", 3, nil, `"x" must be exactly item=value`},
		{"x=1", 3, nil, `item "x" is not an integer`},
		{"=a", 3, nil, `item "" is not an integer`},
		{"1.5=a", 3, nil, "not an integer"},
		{"-1=a", 3, nil, "item -1 is negative"},
		{"3=a", 3, nil, "item 3 is not below shardingTotalCount 3"},
		{"0=a,0=b", 3, nil, "item 0 appears more than once"},
		{"0=a, 00=b", 3, nil, "item 0 appears more than once"},
	}
	for _, tt := range tests {
		got, err := ParseItemParameters(tt.in, tt.total)
		if tt.err != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "shardingItemParameters") {
				t.Errorf("ParseItemParameters(%q, %d) error = %v, want one containing %q", tt.in, tt.total, err, tt.err)
			}
			continue
		}
		if err != nil || got == nil || !maps.Equal(got, tt.want) {
			t.Errorf("ParseItemParameters(%q, %d) = %v, %v; want %v", tt.in, tt.total, got, err, tt.want)
		}
	}
}

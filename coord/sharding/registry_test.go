package sharding

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLookupBuiltins(t *testing.T) {
	for _, name := range []string{"", NameAverage, NameOddEven, NameRoundRobin} {
		if _, err := Lookup(name); err != nil {
			t.Errorf("Lookup(%q): %v", name, err)
		}
	}
	s, _ := Lookup("")
	if got := s.Shard([]string{"a", "b", "c"}, "x", 8); !reflect.DeepEqual(got, Average.Shard([]string{"a", "b", "c"}, "x", 8)) {
		t.Errorf("Lookup(\"\") is not average: %v", got)
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("random")
	if !errors.Is(err, ErrUnknownStrategy) {
		t.Fatalf("Lookup(random) = %v, want ErrUnknownStrategy", err)
	}
	for _, want := range []string{"jobShardingStrategy", `"random"`, NameAverage, NameOddEven, NameRoundRobin} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestRegister(t *testing.T) {
	allToFirst := StrategyFunc(func(servers []string, _ string, total int) map[string][]int {
		res := map[string][]int{}
		for i, s := range SortedServers(servers) {
			res[s] = []int{}
			if i == 0 {
				for it := range max(total, 0) {
					res[s] = append(res[s], it)
				}
			}
		}
		return res
	})
	if err := Register("test-all-to-first", allToFirst); err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() { // the registry is process-global; keep -count=N runs independent
		registryMu.Lock()
		delete(registered, "test-all-to-first")
		registryMu.Unlock()
	})
	s, err := Lookup("test-all-to-first")
	if err != nil {
		t.Fatalf("Lookup after Register: %v", err)
	}
	if got := s.Shard([]string{"b", "a"}, "j", 3); !reflect.DeepEqual(got, map[string][]int{"a": {0, 1, 2}, "b": {}}) {
		t.Errorf("registered strategy gave %v", got)
	}
	if !slices.Contains(Names(), "test-all-to-first") {
		t.Errorf("Names() = %v lacks the registered name", Names())
	}

	tests := []struct {
		name string
		s    Strategy
		want error
	}{
		{"test-all-to-first", allToFirst, ErrDuplicateStrategy},
		{NameAverage, allToFirst, ErrDuplicateStrategy},
		{"", allToFirst, ErrBadStrategy},
		{"has space", allToFirst, ErrBadStrategy},
		{"a/b", allToFirst, ErrBadStrategy},
		{"nil-strategy", nil, ErrBadStrategy},
	}
	for _, tt := range tests {
		if err := Register(tt.name, tt.s); !errors.Is(err, tt.want) {
			t.Errorf("Register(%q) = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestNamesSorted(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names() not sorted: %v", names)
	}
	for _, n := range []string{NameAverage, NameOddEven, NameRoundRobin} {
		if !slices.Contains(names, n) {
			t.Errorf("Names() = %v lacks %q", names, n)
		}
	}
}

package sharding

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestJavaStringHashCode(t *testing.T) {
	// Values as java.lang.String.hashCode returns them.
	tests := []struct {
		in   string
		want int32
	}{
		{"", 0},
		{"a", 97},
		{"Aa", 2112},
		{"BB", 2112},
		{"hello", 99162322},
		{"hello world", 1794106052}, // overflows int32 on the way
		{"The quick brown fox jumps over the lazy dog", -609428141}, // wraps negative
		{"polygenelubricants", -2147483648},                         // Integer.MIN_VALUE
		{"日本", 835047},                                              // BMP characters, one unit each
		{"😀", 1772899},                                              // surrogate pair: two units
	}
	for _, tt := range tests {
		if got := JavaStringHashCode(tt.in); got != tt.want {
			t.Errorf("JavaStringHashCode(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestStrategies(t *testing.T) {
	abc := []string{"c", "a", "b"} // deliberately unsorted
	tests := []struct {
		name     string
		strategy Strategy
		servers  []string
		job      string
		total    int
		want     map[string][]int
	}{
		{"average 3/8 reference example", Average, abc, "any", 8,
			map[string][]int{"a": {0, 1, 6}, "b": {2, 3, 7}, "c": {4, 5}}},
		{"average 3/10 reference example", Average, abc, "any", 10,
			map[string][]int{"a": {0, 1, 2, 9}, "b": {3, 4, 5}, "c": {6, 7, 8}}},
		{"average 3/9 even split", Average, abc, "any", 9,
			map[string][]int{"a": {0, 1, 2}, "b": {3, 4, 5}, "c": {6, 7, 8}}},
		{"average fewer items than servers", Average, abc, "any", 2,
			map[string][]int{"a": {0}, "b": {1}, "c": {}}},
		{"average one server", Average, []string{"x"}, "any", 3,
			map[string][]int{"x": {0, 1, 2}}},
		{"average no servers", Average, nil, "any", 5, map[string][]int{}},
		{"average zero total", Average, abc, "any", 0,
			map[string][]int{"a": {}, "b": {}, "c": {}}},
		{"average negative total", Average, abc, "any", -3,
			map[string][]int{"a": {}, "b": {}, "c": {}}},
		{"average duplicate servers collapse", Average, []string{"b", "a", "b"}, "any", 3,
			map[string][]int{"a": {0, 2}, "b": {1}}},
		// hashCode("job-even") = -1661663958, even: servers reversed.
		{"odd-even even hash reverses", OddEven, abc, "job-even", 8,
			map[string][]int{"c": {0, 1, 6}, "b": {2, 3, 7}, "a": {4, 5}}},
		// hashCode("job-odd") = -1439066337: a negative odd number, % 2 = -1, odd.
		{"odd-even negative odd hash keeps order", OddEven, abc, "job-odd", 8,
			map[string][]int{"a": {0, 1, 6}, "b": {2, 3, 7}, "c": {4, 5}}},
		// hashCode("") = 0, even.
		{"odd-even empty name is even", OddEven, abc, "", 10,
			map[string][]int{"c": {0, 1, 2, 9}, "b": {3, 4, 5}, "a": {6, 7, 8}}},
		{"odd-even no servers", OddEven, nil, "job-even", 8, map[string][]int{}},
		// 99162322 % 3 = 1: order b, c, a.
		{"round-robin offset 1", RoundRobin, abc, "hello", 8,
			map[string][]int{"b": {0, 1, 6}, "c": {2, 3, 7}, "a": {4, 5}}},
		// 1794106052 % 3 = 2: order c, a, b.
		{"round-robin offset 2", RoundRobin, abc, "hello world", 8,
			map[string][]int{"c": {0, 1, 6}, "a": {2, 3, 7}, "b": {4, 5}}},
		// abs(-609428141) = 609428141, % 3 = 2: order c, a, b.
		{"round-robin negative hash", RoundRobin, abc, "The quick brown fox jumps over the lazy dog", 8,
			map[string][]int{"c": {0, 1, 6}, "a": {2, 3, 7}, "b": {4, 5}}},
		// hashCode = MIN_VALUE; Java abs keeps it negative, % 3 = -2, where
		// ElasticJob would throw. shardflow treats it as offset 0.
		{"round-robin MIN_VALUE hash is offset 0", RoundRobin, abc, "polygenelubricants", 8,
			map[string][]int{"a": {0, 1, 6}, "b": {2, 3, 7}, "c": {4, 5}}},
		{"round-robin no servers", RoundRobin, nil, "hello", 8, map[string][]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.servers)
			got := tt.strategy.Shard(in, tt.job, tt.total)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Shard(%v, %q, %d) = %v, want %v", tt.servers, tt.job, tt.total, got, tt.want)
			}
			if !slices.Equal(in, tt.servers) {
				t.Errorf("Shard modified its servers argument: %v, was %v", in, tt.servers)
			}
			for s, items := range got {
				if items == nil {
					t.Errorf("server %q got a nil slice, want empty non-nil", s)
				}
			}
		})
	}
}

func TestRoundRobinOffset(t *testing.T) {
	tests := []struct {
		job  string
		n    int
		want int
	}{
		{"hello", 3, 1},
		{"hello", 1, 0},
		{"polygenelubricants", 3, 0}, // Java: -2 (and an exception)
		{"polygenelubricants", 4, 0}, // Java: 0, MIN_VALUE is divisible by 4
		{"polygenelubricants", 5, 0}, // Java: -3
	}
	for _, tt := range tests {
		if got := roundRobinOffset(tt.job, tt.n); got != tt.want {
			t.Errorf("roundRobinOffset(%q, %d) = %d, want %d", tt.job, tt.n, got, tt.want)
		}
	}
}

// TestPartitionProperties checks, over random inputs, that every built-in
// strategy partitions 0..total-1: every server present, slices sorted and
// disjoint, their union complete, sizes differing by at most one, and the
// result independent of the order servers are listed in.
func TestPartitionProperties(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	strategies := map[string]Strategy{NameAverage: Average, NameOddEven: OddEven, NameRoundRobin: RoundRobin}
	for i := range 2000 {
		n := rng.IntN(12)
		servers := make([]string, n)
		for k := range servers {
			servers[k] = fmt.Sprintf("srv-%d-%d", k, rng.IntN(1000))
		}
		job := fmt.Sprintf("job-%x", rng.Uint32())
		total := rng.IntN(100)
		for name, s := range strategies {
			got := s.Shard(servers, job, total)
			checkPartition(t, fmt.Sprintf("%s #%d servers=%v job=%q total=%d", name, i, servers, job, total), servers, total, got)
			shuffled := slices.Clone(servers)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			if again := s.Shard(shuffled, job, total); !reflect.DeepEqual(again, got) {
				t.Fatalf("%s: result depends on server order: %v vs %v", name, again, got)
			}
		}
	}
}

func checkPartition(t *testing.T, desc string, servers []string, total int, got map[string][]int) {
	t.Helper()
	distinct := SortedServers(servers)
	if len(got) != len(distinct) {
		t.Fatalf("%s: %d servers in result, want %d", desc, len(got), len(distinct))
	}
	if len(distinct) == 0 {
		return
	}
	seen := make([]bool, total)
	minSize, maxSize := total+1, -1
	for _, s := range distinct {
		items, ok := got[s]
		if !ok {
			t.Fatalf("%s: server %q missing", desc, s)
		}
		if !slices.IsSorted(items) {
			t.Fatalf("%s: items of %q not sorted: %v", desc, s, items)
		}
		for _, it := range items {
			if it < 0 || it >= total {
				t.Fatalf("%s: item %d out of range", desc, it)
			}
			if seen[it] {
				t.Fatalf("%s: item %d assigned twice", desc, it)
			}
			seen[it] = true
		}
		minSize, maxSize = min(minSize, len(items)), max(maxSize, len(items))
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("%s: item %d unassigned: %v", desc, i, got)
	}
	if maxSize-minSize > 1 {
		t.Fatalf("%s: sizes from %d to %d differ by more than one", desc, minSize, maxSize)
	}
}

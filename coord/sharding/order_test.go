package sharding

import (
	"reflect"
	"slices"
	"testing"
)

func TestCompareServerIDsIsJavaStringCompareTo(t *testing.T) {
	// Pairs in ascending Java order (String.compareTo < 0), with why.
	tests := []struct{ lo, hi, why string }{
		{"a", "b", "ASCII"},
		{"a", "ab", "prefix first"},
		{"", "a", "empty first"},
		{"10.0.0.10", "10.0.0.9", "no numeric order, as in Java"},
		{"\U0001F600", "\uE000", "surrogate 0xD83D < 0xE000, though U+1F600 > U+E000"},
		{"\U00010000", "\uFFFF", "surrogate 0xD800 < 0xFFFF"},
		{"host-\U0001F600", "host-\uFFFD", "same after a common prefix"},
		{"\uD7FF", "\U00010000", "U+D7FF < surrogate 0xD800"},
		{"\U0001F600", "\U0001F601", "same high surrogate: low surrogates decide"},
		{"\U0001F600", "\U00020000", "0xD83D < 0xD840"},
	}
	for _, tt := range tests {
		if got := CompareServerIDs(tt.lo, tt.hi); got != -1 {
			t.Errorf("CompareServerIDs(%+q, %+q) = %d, want -1 (%s)", tt.lo, tt.hi, got, tt.why)
		}
		if got := CompareServerIDs(tt.hi, tt.lo); got != 1 {
			t.Errorf("CompareServerIDs(%+q, %+q) = %d, want 1 (%s)", tt.hi, tt.lo, got, tt.why)
		}
	}
	if got := CompareServerIDs("\U0001F600x", "\U0001F600x"); got != 0 {
		t.Errorf("equal ids compare %d", got)
	}
	// Two invalid byte sequences are both U+FFFD to Java: the bytes break
	// the tie, so every server sorts them the same way.
	if a, b := "\xff", "\xfe"; CompareServerIDs(a, b) != 1 || CompareServerIDs(b, a) != -1 {
		t.Errorf("ids Java holds equal are not ordered by bytes")
	}
}

func TestSortedServersJavaOrder(t *testing.T) {
	in := []string{"\uE000", "b", "\U0001F600", "\uFFFF", "a", "\U00010000", "b"}
	want := []string{"a", "b", "\U00010000", "\U0001F600", "\uE000", "\uFFFF"}
	if got := SortedServers(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("SortedServers = %+q, want %+q", got, want)
	}
	if slices.IsSorted(want) {
		t.Fatal("the table no longer tells Java order from Go's byte order")
	}
}

func TestStrategiesUseJavaOrder(t *testing.T) {
	// Java order: U+1F600 first (surrogate 0xD83D < 0xE000), so it takes
	// the first range and the remainder item.
	servers := []string{"\uE000", "\U0001F600"}
	got := Average.Shard(servers, "j", 3)
	want := map[string][]int{"\U0001F600": {0, 2}, "\uE000": {1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Average = %+v, want %+v", got, want)
	}
}

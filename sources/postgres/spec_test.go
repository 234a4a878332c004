package postgres_test

import (
	"testing"

	"github.com/shardflow/shardflow/sources/postgres"
)

func TestBucketRangeCoversEveryBucketOnce(t *testing.T) {
	for _, total := range []int{1, 2, 3, 7, 8, 10, 100, 1023, 1024} {
		owner := make([]int, postgres.NumBuckets)
		for i := range owner {
			owner[i] = -1
		}
		for item := 0; item < total; item++ {
			lo, hi, ok := postgres.BucketRange(item, total)
			if !ok {
				t.Fatalf("total %d item %d owns no bucket", total, item)
			}
			for b := lo; b <= hi; b++ {
				if owner[b] != -1 {
					t.Fatalf("total %d: bucket %d owned by items %d and %d", total, b, owner[b], item)
				}
				owner[b] = item
			}
		}
		for b, o := range owner {
			if o == -1 {
				t.Fatalf("total %d: bucket %d owned by no item", total, b)
			}
		}
	}
}

func TestBucketRangeEdges(t *testing.T) {
	tests := []struct {
		item, total int
		lo, hi      int
		ok          bool
	}{
		{0, 1, 0, 1023, true},
		{1, 2, 512, 1023, true},
		{0, 2048, 0, -1, false}, // more items than buckets: some own none
		{1, 2048, 0, 0, true},
		{-1, 4, 0, -1, false},
		{4, 4, 0, -1, false},
		{0, 0, 0, -1, false},
	}
	for _, tc := range tests {
		lo, hi, ok := postgres.BucketRange(tc.item, tc.total)
		if ok != tc.ok || (ok && (lo != tc.lo || hi != tc.hi)) {
			t.Errorf("BucketRange(%d, %d) = %d, %d, %v; want %d, %d, %v", tc.item, tc.total, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
}

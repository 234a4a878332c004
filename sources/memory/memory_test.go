package memory

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/dataflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func seed(t *testing.T, n int) *Source[int] {
	t.Helper()
	s := NewSource[int]()
	for i := 0; i < n; i++ {
		if err := s.Add(Record[int]{ID: int64(i), Value: i}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestFetchPartitionsByItemAndDrains(t *testing.T) {
	const n, total = 10_000, 8
	s := seed(t, n)
	seen := make(map[int64]int)
	for item := 0; item < total; item++ {
		sh := dataflow.Shard{Item: item, Total: total, FetchCount: 333, Epoch: 1}
		for {
			recs, err := s.Fetch(context.Background(), sh)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			if len(recs) > 333 {
				t.Fatalf("fetched %d > FetchCount", len(recs))
			}
			lo, hi := BucketRange(item, total)
			for _, r := range recs {
				if b := int(r.ID % Buckets); b < lo || b >= hi {
					t.Fatalf("item %d got record %d of bucket %d outside [%d,%d)", item, r.ID, b, lo, hi)
				}
				seen[r.ID]++
				if err := s.Done(sh, r.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("saw %d distinct records, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("record %d fetched %d times", id, c)
		}
	}
	if p, c, d, f := s.Counts(); p != 0 || c != 0 || d != n || f != 0 {
		t.Fatalf("counts pending=%d claimed=%d done=%d failed=%d", p, c, d, f)
	}
}

func TestNewerEpochTakesOverClaimsAndFencesOldOwner(t *testing.T) {
	s := seed(t, 100)
	old := dataflow.Shard{Item: 0, Total: 1, FetchCount: 100, Epoch: 5}
	recs, _ := s.Fetch(context.Background(), old)
	if len(recs) != 100 {
		t.Fatalf("fetched %d, want 100", len(recs))
	}
	// Same epoch: nothing left to claim.
	if again, _ := s.Fetch(context.Background(), old); len(again) != 0 {
		t.Fatalf("same epoch re-fetched %d claimed records", len(again))
	}
	// An older epoch cannot steal them.
	if stale, _ := s.Fetch(context.Background(), dataflow.Shard{Item: 0, Total: 1, FetchCount: 100, Epoch: 4}); len(stale) != 0 {
		t.Fatalf("older epoch fetched %d records", len(stale))
	}
	newer := dataflow.Shard{Item: 0, Total: 1, FetchCount: 100, Epoch: 6}
	taken, _ := s.Fetch(context.Background(), newer)
	if len(taken) != 100 {
		t.Fatalf("newer epoch took over %d, want 100", len(taken))
	}
	if err := s.Done(old, recs[0].ID); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("old owner's Done = %v, want ErrNotClaimed", err)
	}
	if err := s.Done(newer, recs[0].ID); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseAndFail(t *testing.T) {
	s := seed(t, 3)
	sh := dataflow.Shard{Item: 0, Total: 1, FetchCount: 10, Epoch: 1}
	recs, _ := s.Fetch(context.Background(), sh)
	if err := s.Fail(sh, recs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(sh, recs[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Done(sh, recs[2].ID); err != nil {
		t.Fatal(err)
	}
	again, _ := s.Fetch(context.Background(), sh)
	if len(again) != 1 || again[0].ID != recs[1].ID {
		t.Fatalf("after release fetched %v, want only record %d", again, recs[1].ID)
	}
	if p, c, d, f := s.Counts(); p != 0 || c != 1 || d != 1 || f != 1 {
		t.Fatalf("counts pending=%d claimed=%d done=%d failed=%d", p, c, d, f)
	}
}

func TestBadInput(t *testing.T) {
	s := NewSource[int]()
	if err := s.Add(Record[int]{ID: -1}); err == nil {
		t.Fatal("negative id accepted")
	}
	if err := s.Add(Record[int]{ID: 1}, Record[int]{ID: 1}); err == nil {
		t.Fatal("duplicate id accepted")
	}
	if _, err := s.Fetch(context.Background(), dataflow.Shard{Item: 3, Total: 2}); err == nil {
		t.Fatal("item >= total accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Fetch(ctx, dataflow.Shard{Item: 0, Total: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

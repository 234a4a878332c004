package memsink

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/dataflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSinkCountsDuplicatesAndHonoursFence(t *testing.T) {
	s := NewSink[int]()
	sh := dataflow.Shard{Item: 0, Total: 1}
	for _, k := range []int{1, 2, 2, 3, 3, 3} {
		if err := s.Write(context.Background(), sh, k); err != nil {
			t.Fatal(err)
		}
	}
	if s.Writes() != 6 || s.Distinct() != 3 || s.Duplicates() != 2 || s.Count(3) != 3 {
		t.Fatalf("writes=%d distinct=%d duplicates=%d count(3)=%d", s.Writes(), s.Distinct(), s.Duplicates(), s.Count(3))
	}
	fenced := errors.New("fenced")
	stale := sh.WithFence(func(context.Context) error { return fenced })
	if err := s.Write(context.Background(), stale, 9); !errors.Is(err, fenced) {
		t.Fatalf("fenced write = %v", err)
	}
	if s.Count(9) != 0 {
		t.Fatal("a fenced-off shard's write was recorded")
	}
}

// Package memory is an in-process source of records for demos and tests. It
// mirrors the Postgres source's claim mode: records live in buckets
// (id mod Buckets), each shard item owns a contiguous range of buckets, Fetch
// claims pending records of the item under the shard's fencing epoch, and
// Done/Fail release them. A claim made under an older epoch is taken over by a
// fetch under a newer one, so records of a crashed or fenced-off owner are
// never lost.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardflow/shardflow/dataflow"
)

// Buckets is the number of buckets records are spread over. Shard item i of n
// owns buckets [i*Buckets/n, (i+1)*Buckets/n): a new total moves no record
// between buckets.
const Buckets = 1024

// ErrNotClaimed is returned by Done and Fail for a record this epoch does not hold.
var ErrNotClaimed = errors.New("memory source: record is not claimed by this shard epoch; it was fenced off or already finished")

// Record is one unit of work.
type Record[T any] struct {
	ID    int64
	Value T
}

type state uint8

const (
	statePending state = iota
	stateClaimed
	stateDone
	stateFailed
)

type entry[T any] struct {
	rec   Record[T]
	state state
	epoch int64
}

// Source is a claimable in-memory table. Safe for concurrent use.
type Source[T any] struct {
	mu      sync.Mutex
	buckets [Buckets][]*entry[T]
	byID    map[int64]*entry[T]
	// cursor[b] is the index of the first possibly pending entry of bucket b.
	cursor  [Buckets]int
	pending int
	done    int
	failed  int
}

// NewSource returns an empty source.
func NewSource[T any]() *Source[T] {
	return &Source[T]{byID: make(map[int64]*entry[T])}
}

// Add appends records as pending. IDs must be unique and >= 0.
func (s *Source[T]) Add(recs ...Record[T]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		if r.ID < 0 {
			return fmt.Errorf("memory source: record id %d is negative; ids must be >= 0", r.ID)
		}
		if _, dup := s.byID[r.ID]; dup {
			return fmt.Errorf("memory source: duplicate record id %d", r.ID)
		}
		e := &entry[T]{rec: r}
		s.byID[r.ID] = e
		b := r.ID % Buckets
		s.buckets[b] = append(s.buckets[b], e)
		s.pending++
	}
	return nil
}

// BucketRange returns the buckets [lo, hi) owned by item of total.
func BucketRange(item, total int) (lo, hi int) {
	return item * Buckets / total, (item + 1) * Buckets / total
}

// Fetch claims up to shard.FetchCount pending records of shard.Item under
// shard.Epoch. Records claimed under an older epoch are claimed again (their
// owner lost the item). It never blocks.
func (s *Source[T]) Fetch(ctx context.Context, shard dataflow.Shard) ([]Record[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if shard.Total <= 0 || shard.Item < 0 || shard.Item >= shard.Total {
		return nil, fmt.Errorf("memory source: shard item %d of total %d is out of range", shard.Item, shard.Total)
	}
	limit := max(shard.FetchCount, 1)
	lo, hi := BucketRange(shard.Item, shard.Total)
	out := make([]Record[T], 0, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := lo; b < hi && len(out) < limit; b++ {
		entries := s.buckets[b]
		advancing := true
		for i := s.cursor[b]; i < len(entries) && len(out) < limit; i++ {
			e := entries[i]
			switch {
			case e.state == statePending:
				s.pending--
			case e.state == stateClaimed && e.epoch < shard.Epoch:
				// Fenced-off owner: take the claim over.
			default:
				if e.state == stateDone || e.state == stateFailed {
					if advancing {
						s.cursor[b] = i + 1
					}
				} else {
					advancing = false
				}
				continue
			}
			advancing = false
			e.state, e.epoch = stateClaimed, shard.Epoch
			out = append(out, e.rec)
		}
	}
	return out, nil
}

// Done marks a record claimed under shard's epoch as done.
func (s *Source[T]) Done(shard dataflow.Shard, id int64) error { return s.finish(shard, id, stateDone) }

// Fail marks a record claimed under shard's epoch as failed (not retried).
func (s *Source[T]) Fail(shard dataflow.Shard, id int64) error {
	return s.finish(shard, id, stateFailed)
}

// Release returns a claimed record to pending, to be fetched again.
func (s *Source[T]) Release(shard dataflow.Shard, id int64) error {
	return s.finish(shard, id, statePending)
}

func (s *Source[T]) finish(shard dataflow.Shard, id int64, to state) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok || e.state != stateClaimed || e.epoch != shard.Epoch {
		return fmt.Errorf("%w (record %d, epoch %d)", ErrNotClaimed, id, shard.Epoch)
	}
	e.state = to
	switch to {
	case stateDone:
		s.done++
	case stateFailed:
		s.failed++
	case statePending:
		s.pending++
		if b := id % Buckets; s.cursor[b] > 0 {
			s.cursor[b] = 0
		}
	}
	return nil
}

// Counts reports how many records are pending, claimed, done and failed.
func (s *Source[T]) Counts() (pending, claimed, done, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, len(s.byID) - s.pending - s.done - s.failed, s.done, s.failed
}

// Remaining reports the records of item (of total) not yet done or failed.
func (s *Source[T]) Remaining(item, total int) int {
	lo, hi := BucketRange(item, total)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for b := lo; b < hi; b++ {
		for _, e := range s.buckets[b][s.cursor[b]:] {
			if e.state == statePending || e.state == stateClaimed {
				n++
			}
		}
	}
	return n
}

// Package memsink is an in-process sink for demos and tests: it records every
// effect by key, so a test can tell lost effects (a key never written) from
// duplicate effects (a key written twice).
package memsink

import (
	"context"
	"sync"

	"github.com/shardflow/shardflow/dataflow"
)

// Sink records effects by key. Safe for concurrent use.
type Sink[K comparable] struct {
	mu         sync.Mutex
	counts     map[K]int
	writes     int
	duplicates int
}

// NewSink returns an empty sink.
func NewSink[K comparable]() *Sink[K] { return &Sink[K]{counts: make(map[K]int)} }

// Write records one effect for key after the shard's fencing check: a shard
// that no longer owns its item gets the check's error and nothing is recorded.
func (s *Sink[K]) Write(ctx context.Context, shard dataflow.Shard, key K) error {
	if err := shard.CheckOwnership(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[key]++
	s.writes++
	if s.counts[key] == 2 {
		s.duplicates++
	}
	return nil
}

// Writes is the number of effects recorded.
func (s *Sink[K]) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Distinct is the number of distinct keys written.
func (s *Sink[K]) Distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counts)
}

// Duplicates is the number of keys written more than once.
func (s *Sink[K]) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duplicates
}

// Count is how many times key was written.
func (s *Sink[K]) Count(key K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[key]
}

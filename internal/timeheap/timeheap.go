// Package timeheap is a min-heap of entries ordered by a time, each entry
// told its position, so that one can be removed or moved in O(log n): the
// timer queues of the Node's cron loop (dataflow) and of the stats
// reporting group, one goroutine and one timer over any number of jobs.
package timeheap

import (
	"container/heap"
	"time"
)

// Heap orders entries by at(entry), earliest first, and calls
// setPos(entry, i) whenever an entry's position changes (-1 when it leaves
// the heap), so that its owner can Remove or Fix it. The zero Heap is not
// usable; make one with New. Not safe for concurrent use.
type Heap[E any] struct {
	entries []E
	at      func(E) time.Time
	setPos  func(E, int)
}

// New returns an empty heap ordered by at, reporting positions to setPos.
func New[E any](at func(E) time.Time, setPos func(E, int)) *Heap[E] {
	return &Heap[E]{at: at, setPos: setPos}
}

// Len is the number of entries.
func (h *Heap[E]) Len() int { return len(h.entries) }

// Min returns the earliest entry; Len must be > 0.
func (h *Heap[E]) Min() E { return h.entries[0] }

// Push adds e.
func (h *Heap[E]) Push(e E) { heap.Push((*adapter[E])(h), e) }

// Remove removes and returns the entry at position pos.
func (h *Heap[E]) Remove(pos int) E { return heap.Remove((*adapter[E])(h), pos).(E) }

// Fix restores the order after the time of the entry at pos changed.
func (h *Heap[E]) Fix(pos int) { heap.Fix((*adapter[E])(h), pos) }

// Clear removes every entry (each told position -1).
func (h *Heap[E]) Clear() {
	for _, e := range h.entries {
		h.setPos(e, -1)
	}
	clear(h.entries)
	h.entries = h.entries[:0]
}

// adapter is Heap as a container/heap.Interface.
type adapter[E any] Heap[E]

func (a *adapter[E]) Len() int { return len(a.entries) }
func (a *adapter[E]) Less(i, j int) bool {
	return a.at(a.entries[i]).Before(a.at(a.entries[j]))
}
func (a *adapter[E]) Swap(i, j int) {
	a.entries[i], a.entries[j] = a.entries[j], a.entries[i]
	a.setPos(a.entries[i], i)
	a.setPos(a.entries[j], j)
}
func (a *adapter[E]) Push(x any) {
	e := x.(E)
	a.setPos(e, len(a.entries))
	a.entries = append(a.entries, e)
}
func (a *adapter[E]) Pop() any {
	n := len(a.entries) - 1
	e := a.entries[n]
	var zero E
	a.entries[n] = zero
	a.entries = a.entries[:n]
	a.setPos(e, -1)
	return e
}

package groupcommit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// scanQueue is the take of the queue before the ready heap, kept as the
// specification the heap must agree with (TestTakeAgreesWithScan) and as
// the baseline of BenchmarkTake: every take scans the whole queue in
// arrival order into fresh maps of the keys taken and of the keys of the
// requests left behind. With fullStops, a request that would pass a bound
// ends the batch, as the heap's take does; without, it is passed over, as
// it was.
type scanQueue struct {
	maxOps, maxBytes int
	fullStops        bool
	queue            []*scanReq
	held             map[string]int
	heldAlone        bool
}

// scanReq is a scanQueue's request.
type scanReq struct {
	id        int
	keys      []string // distinct
	alone     bool
	ops, size int
}

func (q *scanQueue) take() []*scanReq {
	if q.heldAlone {
		return nil
	}
	var batch []*scanReq
	taken := map[string]bool{}
	blocked := map[string]bool{}
	ops, size := 0, 0
	rest := q.queue[:0]
	full := false
	for i, r := range q.queue {
		if full {
			rest = append(rest, q.queue[i:]...)
			break
		}
		if r.alone {
			if len(batch) == 0 && len(q.held) == 0 {
				batch = append(batch, r)
				full = true
				continue
			}
			rest = append(rest, q.queue[i:]...)
			break
		}
		fits := len(batch) == 0 || (q.maxOps <= 0 || ops+r.ops <= q.maxOps) && (q.maxBytes <= 0 || size+r.size <= q.maxBytes)
		free := true
		for _, k := range r.keys {
			if taken[k] || blocked[k] || q.held[k] > 0 {
				free = false
				break
			}
		}
		if free && !fits && q.fullStops {
			rest = append(rest, q.queue[i:]...)
			break
		}
		if !fits || !free {
			for _, k := range r.keys {
				blocked[k] = true
			}
			rest = append(rest, r)
			continue
		}
		batch = append(batch, r)
		for _, k := range r.keys {
			taken[k] = true
		}
		ops, size = ops+r.ops, size+r.size
	}
	clear(q.queue[len(rest):])
	q.queue = rest
	for _, r := range batch {
		if r.alone {
			q.heldAlone = true
		}
		for _, k := range r.keys {
			q.held[k]++
		}
	}
	return batch
}

func (q *scanQueue) release(batch []*scanReq) {
	for _, r := range batch {
		if r.alone {
			q.heldAlone = false
		}
		for _, k := range r.keys {
			if q.held[k]--; q.held[k] <= 0 {
				delete(q.held, k)
			}
		}
	}
}

func (q *scanQueue) withdraw(r *scanReq) {
	if i := slices.Index(q.queue, r); i >= 0 {
		q.queue = slices.Delete(q.queue, i, i+1)
	}
}

// twin is one request in both queues.
type twin struct {
	heap *Request[struct{}]
	scan *scanReq
	keys []string // as the KeyFunc gave them, duplicates included
}

func newTwin(id int, keys []string, alone bool, nops int) twin {
	ops := make([]store.Op, nops)
	for i := range ops {
		ops[i] = &store.CheckOp{Path: "/ns/x" + strconv.Itoa(id%7), Version: 1}
	}
	r := &Request[struct{}]{Ops: ops, size: store.MultiSize(ops), alone: alone, idx: -1}
	s := &scanReq{id: id, alone: alone, ops: nops, size: r.size}
	for _, k := range keys {
		if !slices.Contains(s.keys, k) {
			s.keys = append(s.keys, k)
		}
	}
	if alone {
		keys, s.keys = nil, nil
	}
	return twin{heap: r, scan: s, keys: keys}
}

// TestTakeAgreesWithScan: on random sequences of requests queued (keys
// shared, named twice, requests alone, sizes passing the bounds), batches
// taken, batches done and requests withdrawn (at the head, in the middle
// of a key's line), the heap's take makes the same batches as the whole
// scan, and leaves no key state behind once all is done. Randomized: the
// seed is printed.
func TestTakeAgreesWithScan(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for round := range 200 {
		maxOps, maxBytes := []int{0, 5, 12}[rng.IntN(3)], []int{0, 400}[rng.IntN(2)]
		q := NewQueue[struct{}](nil, QueueConfig[struct{}]{MaxOps: maxOps, MaxBytes: maxBytes})
		ref := &scanQueue{maxOps: maxOps, maxBytes: maxBytes, fullStops: true, held: map[string]int{}}
		nkeys := 1 + rng.IntN(10)
		var queued []twin
		type flight struct {
			heap []*Request[struct{}]
			scan []*scanReq
		}
		var inFlight []flight
		maxInFlight := 1 + rng.IntN(4)
		step := func(what string) {
			t.Helper()
			if q.queued != len(ref.queue) {
				t.Fatalf("seed %d round %d, after %s: %d queued, want %d", seed, round, what, q.queued, len(ref.queue))
			}
		}
		take := func() bool {
			batch := q.takeLocked(nil)
			want := ref.take()
			got := make([]int, len(batch))
			for i, r := range batch {
				got[i] = slices.IndexFunc(queued, func(x twin) bool { return x.heap == r })
				got[i] = queued[got[i]].scan.id
			}
			wantIDs := make([]int, len(want))
			for i, r := range want {
				wantIDs[i] = r.id
			}
			if !slices.Equal(got, wantIDs) {
				t.Fatalf("seed %d round %d: took %v, the scan takes %v", seed, round, got, wantIDs)
			}
			if len(batch) > 0 {
				inFlight = append(inFlight, flight{batch, want})
			}
			step("a take")
			return len(batch) > 0
		}
		for id := 0; id < 60; id++ {
			switch n := rng.IntN(10); {
			case n < 5:
				keys := make([]string, rng.IntN(4))
				for i := range keys {
					keys[i] = "k" + strconv.Itoa(rng.IntN(nkeys))
				}
				tw := newTwin(id, keys, rng.IntN(30) == 0, 1+rng.IntN(6))
				queued = append(queued, tw)
				q.pushLocked(tw.heap, tw.keys)
				ref.queue = append(ref.queue, tw.scan)
				step("a push")
			case n < 7 && len(inFlight) < maxInFlight:
				take()
			case n < 9 && len(inFlight) > 0:
				i := rng.IntN(len(inFlight))
				q.releaseLocked(inFlight[i].heap)
				ref.release(inFlight[i].scan)
				inFlight = slices.Delete(inFlight, i, i+1)
			case len(ref.queue) > 0:
				s := ref.queue[rng.IntN(len(ref.queue))]
				tw := queued[slices.IndexFunc(queued, func(x twin) bool { return x.scan == s })]
				q.withdraw(tw.heap)
				ref.withdraw(s)
				step("a withdrawal")
			}
		}
		for len(inFlight) > 0 || len(ref.queue) > 0 {
			if len(inFlight) < maxInFlight && take() {
				continue
			}
			if len(inFlight) == 0 {
				t.Fatalf("seed %d round %d: %d queued, none taken, none in flight", seed, round, len(ref.queue))
			}
			q.releaseLocked(inFlight[0].heap)
			ref.release(inFlight[0].scan)
			inFlight = inFlight[1:]
		}
		if len(q.keys) != 0 || q.heldKeys != 0 || q.heldAlone || len(q.ready) != 0 {
			t.Fatalf("seed %d round %d: left %d keys, %d held, alone %v, %d ready", seed, round, len(q.keys), q.heldKeys, q.heldAlone, len(q.ready))
		}
	}
}

// TestTakeLooksOnlyAtWhatMayGo: with thousands of requests queued behind
// held keys, and thousands of one key, a take looks at no more of the
// queue than its batch and the request that ends it, and allocates
// nothing.
func TestTakeLooksOnlyAtWhatMayGo(t *testing.T) {
	q := NewQueue[struct{}](nil, QueueConfig[struct{}]{MaxOps: 64})
	push := func(id int, key string) {
		tw := newTwin(id, []string{key}, false, 7)
		q.pushLocked(tw.heap, tw.keys)
	}
	id := 0
	for ; id < 9; id++ {
		push(id, "held"+strconv.Itoa(id))
	}
	held := q.takeLocked(nil)
	if len(held) != 9 {
		t.Fatalf("first batch %d requests, want 9", len(held))
	}
	for ; id < 5000; id++ {
		push(id, "held"+strconv.Itoa(id%9)) // behind the batch in flight
	}
	for ; id < 10000; id++ {
		push(id, "hot") // one line
	}
	for ; id < 10020; id++ {
		push(id, "free"+strconv.Itoa(id))
	}
	if len(q.ready) != 1+20 {
		t.Fatalf("%d ready, want the hot key's first and the 20 free", len(q.ready))
	}
	batch := make([]*Request[struct{}], 0, 16)
	allocs := testing.AllocsPerRun(1, func() {
		batch = q.takeLocked(batch[:0])
	})
	if len(batch) != 9 || batch[0].Ops == nil || allocs != 0 {
		t.Fatalf("took %d requests with %.0f allocations, want 9 with none", len(batch), allocs)
	}
}

// BenchmarkTake: the cost of taking a tick's queue, the whole scan (scan,
// the take before the ready heap) beside the heap's take: N requests of N
// jobs (7 operations each, a Begin's size) queued, then taken batch after
// batch of at most 64 operations, 4 in flight, as a worker's group
// committer does when N Multis are queued at once. ns/take is the
// iteration's time over its takes.
func BenchmarkTake(b *testing.B) {
	const maxOps, inFlight = 64, 4
	for _, n := range []int{100, 1000, 10000, 30000} {
		twins := make([]twin, n)
		for i := range twins {
			twins[i] = newTwin(i, []string{fmt.Sprintf("/ns/job%05d", i)}, false, 7)
		}
		b.Run(fmt.Sprintf("queue=%d/scan", n), func(b *testing.B) {
			q := &scanQueue{maxOps: maxOps, maxBytes: store.DefaultRequestLimit, held: map[string]int{}}
			takes := 0
			for b.Loop() {
				for _, tw := range twins {
					q.queue = append(q.queue, tw.scan)
				}
				var flight [][]*scanReq
				for len(q.queue) > 0 || len(flight) > 0 {
					if len(flight) == inFlight || len(q.queue) == 0 {
						q.release(flight[0])
						flight = flight[1:]
						continue
					}
					flight = append(flight, q.take())
					takes++
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(takes), "ns/take")
		})
		b.Run(fmt.Sprintf("queue=%d/heap", n), func(b *testing.B) {
			q := NewQueue[struct{}](nil, QueueConfig[struct{}]{MaxOps: maxOps, MaxBytes: store.DefaultRequestLimit})
			takes := 0
			var flight [][]*Request[struct{}]
			var spare [][]*Request[struct{}]
			for b.Loop() {
				for _, tw := range twins {
					q.pushLocked(tw.heap, tw.keys)
				}
				for q.queued > 0 || len(flight) > 0 {
					if len(flight) == inFlight || q.queued == 0 {
						q.releaseLocked(flight[0])
						spare = append(spare, flight[0][:0])
						flight = flight[1:]
						continue
					}
					var batch []*Request[struct{}]
					if len(spare) > 0 {
						batch, spare = spare[len(spare)-1], spare[:len(spare)-1]
					}
					flight = append(flight, q.takeLocked(batch))
					takes++
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(takes), "ns/take")
		})
	}
}

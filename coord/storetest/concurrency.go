package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

const racers = 8

// sessions opens n sessions in the test goroutine (t.Fatal is not allowed
// in others).
func (s *suite) sessions(t *testing.T, n int) []store.Store {
	t.Helper()
	out := make([]store.Store, n)
	for i := range out {
		out[i] = s.open(t)
	}
	return out
}

func (s *suite) concurrency(t *testing.T) {
	parallel(t, "of 8 concurrent Creates of one path exactly one wins", func(t *testing.T) {
		root, c := s.h.Root(t), ctx(t)
		ss := s.sessions(t, racers)
		p := store.Join(root, "leader")
		errs := make([]error, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, st := range ss {
			wg.Go(func() {
				<-start
				_, errs[i] = st.Create(c, p, []byte(strconv.Itoa(i)), store.Ephemeral)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("racers %d and %d both created %s", winner, i, p)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrNodeExists):
				t.Fatalf("racer %d: %v, want nil or ErrNodeExists", i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("no racer created %s", p)
		}
		data, stat := mustGet(t, ss[0], p)
		if string(data) != strconv.Itoa(winner) {
			t.Fatalf("%s holds %q, want the winner's %q", p, data, strconv.Itoa(winner))
		}
		if sess, _ := ss[winner].Session(); stat.EphemeralOwner != sess.ID {
			t.Fatalf("%s owned by 0x%x, want the winner's session 0x%x", p, stat.EphemeralOwner, sess.ID)
		}
	})

	parallel(t, "versioned read-modify-write from 8 sessions loses no increment", func(t *testing.T) {
		root, c := s.h.Root(t), ctx(t)
		ss := s.sessions(t, racers)
		const perRacer = 5
		p := mustCreate(t, ss[0], store.Join(root, "counter"), []byte("0"), store.Persistent)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i, st := range ss {
			wg.Go(func() {
				for done := 0; done < perRacer; {
					data, stat, err := st.Get(c, p)
					if err != nil {
						errs[i] = err
						return
					}
					n, err := strconv.Atoi(string(data))
					if err != nil {
						errs[i] = fmt.Errorf("counter %q: %w", data, err)
						return
					}
					_, err = st.Set(c, p, []byte(strconv.Itoa(n+1)), stat.Version)
					switch {
					case err == nil:
						done++
					case !errors.Is(err, store.ErrBadVersion):
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("racer %d: %v", i, err)
			}
		}
		data, stat := mustGet(t, ss[0], p)
		if want := strconv.Itoa(racers * perRacer); string(data) != want || stat.Version != racers*perRacer {
			t.Fatalf("counter %q version %d, want %s and version %d", data, stat.Version, want, racers*perRacer)
		}
	})

	parallel(t, "concurrent sequential creates get every suffix exactly once", func(t *testing.T) {
		root, c := s.h.Root(t), ctx(t)
		ss := s.sessions(t, racers)
		const perRacer = 5
		q := mustCreate(t, ss[0], store.Join(root, "q"), nil, store.Persistent)
		paths := make([][]string, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i, st := range ss {
			wg.Go(func() {
				for range perRacer {
					p, err := st.Create(c, store.Join(q, "n-"), nil, store.EphemeralSequential)
					if err != nil {
						errs[i] = err
						return
					}
					paths[i] = append(paths[i], p)
				}
			})
		}
		wg.Wait()
		seen := make(map[int]string)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("racer %d: %v", i, err)
			}
			prev := -1
			for _, p := range paths[i] {
				_, n := seqOf(t, p)
				if other, dup := seen[n]; dup {
					t.Fatalf("suffix %d given twice: %s and %s", n, other, p)
				}
				if n <= prev {
					t.Fatalf("racer %d got suffix %d after %d", i, n, prev)
				}
				seen[n], prev = p, n
			}
		}
		for n := range racers * perRacer {
			if _, ok := seen[n]; !ok {
				t.Fatalf("suffix %d never given; got %d suffixes", n, len(seen))
			}
		}
	})
}

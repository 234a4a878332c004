package main

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// ownerWatch follows, through ZooKeeper watches, which shard items of a job
// have a live owner: an item is owned while some server whose status node
// exists lists it in its servers/{id}/sharding node. It records every span
// during which an item had none. Each watch that fires makes it read the
// whole picture again (and arm new watches), so a span shorter than one
// round of reads may go unseen; the spans it reports are measured from the
// first read that saw the item ownerless to the first that saw it owned.
type ownerWatch struct {
	fw    store.FuncWatcher
	base  string // /{namespace}/{job}
	total int
	poke  chan struct{}

	mu    sync.Mutex
	since map[int]time.Time // item -> first seen ownerless
	gaps  []time.Duration
	reads int
}

func newOwnerWatch(st store.Store, namespace, job string, total int) *ownerWatch {
	return &ownerWatch{fw: store.FuncWatcherOf(st), base: "/" + namespace + "/" + job, total: total,
		poke: make(chan struct{}, 1), since: map[int]time.Time{}}
}

// notify is every watch's function: it must not block (FuncWatcher).
func (w *ownerWatch) notify(store.Event) {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// run observes until ctx ends.
func (w *ownerWatch) run(ctx context.Context) error {
	for {
		if err := w.observe(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.poke:
		}
	}
}

func (w *ownerWatch) observe(ctx context.Context) error {
	ids, _, err := w.fw.ChildrenWFunc(ctx, w.base+"/servers", w.notify)
	if errors.Is(err, store.ErrNoNode) {
		// The job is not created yet: read again once it is.
		if ok, _, err := w.fw.ExistsWFunc(ctx, w.base+"/servers", w.notify); err != nil || ok {
			w.notify(store.Event{})
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	owned := map[int]bool{}
	for _, id := range ids {
		live, _, err := w.fw.ExistsWFunc(ctx, w.base+"/servers/"+id+"/status", w.notify)
		if err != nil {
			return err
		}
		data, _, err := w.fw.GetWFunc(ctx, w.base+"/servers/"+id+"/sharding", w.notify)
		if errors.Is(err, store.ErrNoNode) {
			continue
		} else if err != nil {
			return err
		}
		if !live {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(string(data)), ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
				owned[n] = true
			}
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	for item := range w.total {
		s, was := w.since[item]
		switch {
		case !owned[item] && !was:
			w.since[item] = now
		case owned[item] && was:
			w.gaps = append(w.gaps, now.Sub(s))
			delete(w.since, item)
		}
	}
	return nil
}

// reset forgets what was recorded so far (the cluster's start-up).
func (w *ownerWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gaps = nil
	clear(w.since)
}

// settled reports whether the last read saw every item with a live
// owner (false before the first read).
func (w *ownerWatch) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads > 0 && len(w.since) == 0
}

// result returns every recorded span (the open ones up to now), sorted,
// and how many times the picture was read.
func (w *ownerWatch) result() (gaps []time.Duration, reads int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gaps = slices.Clone(w.gaps)
	for _, s := range w.since {
		gaps = append(gaps, time.Since(s))
	}
	slices.Sort(gaps)
	return gaps, w.reads
}

// percentile returns the p-th percentile (0..100) of sorted, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

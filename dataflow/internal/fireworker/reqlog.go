package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// reqLog is a store.Store that records every request's kind, path class
// and latency, aggregated per second (--reqlog): which requests the runs
// of a tick wait for, and how long ZooKeeper takes to answer them.
type reqLog struct {
	store.Store
	start time.Time

	mu  sync.Mutex
	agg map[reqKey]*reqAgg
}

type reqKey struct {
	sec   int
	kind  string
	class string
}

type reqAgg struct {
	n        int
	sum, max time.Duration
}

func newReqLog(st store.Store) *reqLog {
	return &reqLog{Store: st, start: time.Now(), agg: map[reqKey]*reqAgg{}}
}

// class is a path without its namespace and job, digits folded: the
// kind of node a request is for (/ns/job/sharding/3/instance ->
// sharding/N/instance).
func class(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) > 2 {
		parts = parts[2:]
	} else {
		return "<" + fmt.Sprint(len(parts)) + ">"
	}
	for i, s := range parts {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			parts[i] = "N"
		} else if len(s) > 24 {
			parts[i] = "X"
		}
	}
	return strings.Join(parts, "/")
}

func (l *reqLog) note(kind, path string, t0 time.Time) {
	d := time.Since(t0)
	k := reqKey{sec: int(t0.Sub(l.start) / time.Second), kind: kind, class: class(path)}
	l.mu.Lock()
	a := l.agg[k]
	if a == nil {
		a = &reqAgg{}
		l.agg[k] = a
	}
	a.n++
	a.sum += d
	a.max = max(a.max, d)
	l.mu.Unlock()
}

func (l *reqLog) write(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]reqKey, 0, len(l.agg))
	for k := range l.agg {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b reqKey) int {
		if a.sec != b.sec {
			return a.sec - b.sec
		}
		return strings.Compare(a.kind+a.class, b.kind+b.class)
	})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# start %s\n", l.start.UTC().Format(time.RFC3339Nano))
	for _, k := range keys {
		a := l.agg[k]
		fmt.Fprintf(w, "%d %s %s n=%d mean=%.1fms max=%.1fms\n", k.sec, k.kind, k.class, a.n,
			float64(a.sum)/float64(a.n)/1e6, float64(a.max)/1e6)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func (l *reqLog) Create(ctx context.Context, path string, data []byte, mode store.Mode) (string, error) {
	defer l.note("create", path, time.Now())
	return l.Store.Create(ctx, path, data, mode)
}

func (l *reqLog) Get(ctx context.Context, path string) ([]byte, store.Stat, error) {
	defer l.note("get", path, time.Now())
	return l.Store.Get(ctx, path)
}

func (l *reqLog) GetW(ctx context.Context, path string) ([]byte, store.Stat, <-chan store.Event, error) {
	defer l.note("getw", path, time.Now())
	return l.Store.GetW(ctx, path)
}

func (l *reqLog) Exists(ctx context.Context, path string) (bool, store.Stat, error) {
	defer l.note("exists", path, time.Now())
	return l.Store.Exists(ctx, path)
}

func (l *reqLog) ExistsW(ctx context.Context, path string) (bool, store.Stat, <-chan store.Event, error) {
	defer l.note("existsw", path, time.Now())
	return l.Store.ExistsW(ctx, path)
}

func (l *reqLog) Children(ctx context.Context, path string) ([]string, store.Stat, error) {
	defer l.note("children", path, time.Now())
	return l.Store.Children(ctx, path)
}

func (l *reqLog) ChildrenW(ctx context.Context, path string) ([]string, store.Stat, <-chan store.Event, error) {
	defer l.note("childrenw", path, time.Now())
	return l.Store.ChildrenW(ctx, path)
}

func (l *reqLog) GetWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]byte, store.Stat, error) {
	defer l.note("getwf", path, time.Now())
	return l.Store.(store.FuncWatcher).GetWFunc(ctx, path, fn)
}

func (l *reqLog) ExistsWFunc(ctx context.Context, path string, fn store.WatchFunc) (bool, store.Stat, error) {
	defer l.note("existswf", path, time.Now())
	return l.Store.(store.FuncWatcher).ExistsWFunc(ctx, path, fn)
}

func (l *reqLog) ChildrenWFunc(ctx context.Context, path string, fn store.WatchFunc) ([]string, store.Stat, error) {
	defer l.note("childrenwf", path, time.Now())
	return l.Store.(store.FuncWatcher).ChildrenWFunc(ctx, path, fn)
}

func (l *reqLog) ForwardsFuncWatches() bool { return store.FuncWatcherOf(l.Store) != nil }

func (l *reqLog) Set(ctx context.Context, path string, data []byte, version int32) (store.Stat, error) {
	defer l.note("set", path, time.Now())
	return l.Store.Set(ctx, path, data, version)
}

func (l *reqLog) Delete(ctx context.Context, path string, version int32) error {
	defer l.note("delete", path, time.Now())
	return l.Store.Delete(ctx, path, version)
}

func (l *reqLog) MaxRequestBytes() int { return store.RequestLimit(l.Store) }

func (l *reqLog) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	p := ""
	if len(ops) > 0 {
		p = store.OpPath(ops[0])
	}
	defer l.note(fmt.Sprintf("multi%d", min(len(ops), 9)), p, time.Now())
	return l.Store.Multi(ctx, ops...)
}

func (l *reqLog) Sync(ctx context.Context, path string) error {
	defer l.note("sync", path, time.Now())
	return l.Store.Sync(ctx, path)
}

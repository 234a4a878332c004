package zkstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
)

func openBench(b *testing.B) (*zkstore.Store, string) {
	b.Helper()
	s, err := zkstore.Open(context.Background(), zkstore.Config{
		Servers: zkServers(b),
		Logger:  testLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	base := "/zkstore-bench-" + strings.ReplaceAll(b.Name(), "/", "-")
	ctx := context.Background()
	_ = store.DeleteAll(ctx, s, base)
	if err := store.CreateAll(ctx, s, base); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.DeleteAll(context.Background(), s, base) })
	return s, base
}

// BenchmarkGet measures one read round trip; "cancellable" adds the
// goroutine that bounds a call by its context.
func BenchmarkGet(b *testing.B) {
	for _, mode := range []string{"background", "cancellable"} {
		b.Run(mode, func(b *testing.B) {
			s, base := openBench(b)
			ctx := context.Background()
			if mode == "cancellable" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.Get(ctx, base); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSetParallel measures pipelined writes from many goroutines on one
// session.
func BenchmarkSetParallel(b *testing.B) {
	s, base := openBench(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Set(ctx, base, []byte("x"), store.AnyVersion); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMulti10 measures a fenced transaction of ten writes (one check
// plus nine sets), the shape coord uses per server per trigger.
func BenchmarkMulti10(b *testing.B) {
	s, base := openBench(b)
	ctx := context.Background()
	ops := []store.Op{&store.CheckOp{Path: base, Version: store.AnyVersion}}
	for i := range 9 {
		p := fmt.Sprintf("%s/n%d", base, i)
		if _, err := s.Create(ctx, p, nil, store.Persistent); err != nil {
			b.Fatal(err)
		}
		ops = append(ops, &store.SetOp{Path: p, Data: []byte("running"), Version: store.AnyVersion})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Multi(ctx, ops...); err != nil {
			b.Fatal(err)
		}
	}
}

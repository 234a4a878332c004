package memstore_test

import (
	"context"
	"testing"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

func benchSession(b *testing.B) *memstore.Session {
	b.Helper()
	s := memstore.NewServer().Connect()
	b.Cleanup(func() { _ = s.Close() })
	if _, err := s.Create(context.Background(), "/n", []byte("data"), store.Persistent); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkGet(b *testing.B) {
	ctx, s := context.Background(), benchSession(b)
	for b.Loop() {
		if _, _, err := s.Get(ctx, "/n"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSet(b *testing.B) {
	ctx, s := context.Background(), benchSession(b)
	for b.Loop() {
		if _, err := s.Set(ctx, "/n", []byte("data"), store.AnyVersion); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFencedMulti is a CheckOp plus 10 SetOps, the shape of a fenced
// batch of coordination writes.
func BenchmarkFencedMulti(b *testing.B) {
	ctx, s := context.Background(), benchSession(b)
	ops := []store.Op{&store.CheckOp{Path: "/n", Version: store.AnyVersion}}
	for i := range 10 {
		p := store.Join("/n", string(rune('a'+i)))
		if _, err := s.Create(ctx, p, nil, store.Persistent); err != nil {
			b.Fatal(err)
		}
		ops = append(ops, &store.SetOp{Path: p, Data: []byte("running"), Version: store.AnyVersion})
	}
	for b.Loop() {
		if _, err := s.Multi(ctx, ops...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetWAndFire(b *testing.B) {
	ctx, s := context.Background(), benchSession(b)
	for b.Loop() {
		_, _, ch, err := s.GetW(ctx, "/n")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Set(ctx, "/n", nil, store.AnyVersion); err != nil {
			b.Fatal(err)
		}
		<-ch
	}
}

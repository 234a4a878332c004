package coordtest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/storecount"
)

// The harness's own calls on the real stores run as long as their store
// keeps answering (a loaded machine: Postgres seeds 54200030, 54200035,
// 54200540 and 54200543 failed on a fixed 20 s), and end once it answers
// nothing for the stall bound (a hang).
func TestStallCtxOutlivesASlowCallAndEndsAStalledOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess := memstore.NewServer().Connect()
		defer sess.Close()
		st := storecount.New(sess)
		const stall = 30 * time.Second
		ctx, cancel := stallCtx(context.Background(), stall, st)
		defer cancel()
		// A slow call: one request answered every 20 s, five minutes long.
		for range 15 {
			time.Sleep(20 * time.Second)
			if _, _, err := st.Exists(ctx, "/"); err != nil {
				t.Fatalf("a request of a call answered every 20 s failed: %v", withCause(ctx, err))
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the ctx of a call answered every 20 s ended: %v", context.Cause(ctx))
		}
		// Then nothing answered: ended within the bound and one tick.
		stalledAt := time.Now()
		<-ctx.Done()
		if d := time.Since(stalledAt); d < stall-stall/8 || d > stall+stall/8 {
			t.Fatalf("ended %v after the last answer, want the stall bound %v (+/- a tick)", d, stall)
		}
		if err := withCause(ctx, ctx.Err()); !errors.Is(context.Cause(ctx), errStalled) {
			t.Fatalf("ended with %v, want errStalled", err)
		}
	})
}

// A ctx cancelled by its caller leaves no goroutine behind (goleak in
// TestMain) and carries no stall.
func TestStallCtxCancelledEndsItsWatch(t *testing.T) {
	sess := memstore.NewServer().Connect()
	defer sess.Close()
	ctx, cancel := stallCtx(context.Background(), time.Hour, storecount.New(sess))
	cancel()
	if errors.Is(context.Cause(ctx), errStalled) {
		t.Fatal("a cancelled ctx reports a stall")
	}
}

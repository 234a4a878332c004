package testwait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a TB that records the failure instead of ending the goroutine.
type recorder struct{ failure string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		start := time.Now()
		For(t, time.Minute, "the fifth call", func() bool { return calls.Add(1) == 5 })
		if calls.Load() != 5 {
			t.Fatalf("%d calls, want 5", calls.Load())
		}
		// Pauses 1+2+4+8 ms: a condition that holds soon is seen soon.
		if waited := time.Since(start); waited != 15*time.Millisecond {
			t.Fatalf("waited %v (fake clock), want 15ms", waited)
		}
	})
}

func TestForNoErrorReportsWhatItAwaitedAndTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		n := 0
		ForNoError(&r, 10*time.Second, "the answer", func() error {
			n++
			return fmt.Errorf("answer %d is wrong", n)
		})
		for _, want := range []string{"waited 10s for the answer", "context deadline exceeded", fmt.Sprintf("answer %d is wrong", n)} {
			if !strings.Contains(r.failure, want) {
				t.Errorf("failure %q does not contain %q", r.failure, want)
			}
		}
		// 1+2+...+64 ms, then every 100 ms: the checks thin out.
		if n < 100 || n > 110 {
			t.Errorf("%d checks in 10s, want about 105", n)
		}
	})
}

func TestForReportsAFalseCondition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		For(&r, time.Second, "never", func() bool { return false })
		if !strings.Contains(r.failure, "waited 1s for never: ") || !strings.Contains(r.failure, errNotYet.Error()) {
			t.Fatalf("failure %q", r.failure)
		}
	})
}

func TestPollStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Poll(ctx, func(context.Context) error { return errors.New("down") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("Poll = %v, want context.Canceled with the last error", err)
	}
}

func TestRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		ch <- 7
		if got := Recv(t, time.Second, "seven", ch); got != 7 {
			t.Fatalf("Recv = %d", got)
		}
		var r recorder
		Recv(&r, 5*time.Second, "the resharding signal", ch)
		if r.failure != "testwait: waited 5s for the resharding signal: no signal" {
			t.Fatalf("failure %q", r.failure)
		}
	})
}

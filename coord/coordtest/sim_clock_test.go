package coordtest

import (
	"testing"
	"time"
)

// zkLikeBackend is a Backend whose clock skew moves the local clock, as
// ZooKeeper's does (only the clock methods are used).
type zkLikeBackend struct {
	Backend
	skew time.Duration
}

func (b *zkLikeBackend) SkewServerClock(_ testing.TB, d time.Duration) { b.skew = d }
func (b *zkLikeBackend) LocalNow() time.Time                           { return time.Now().Add(-b.skew) }
func (b *zkLikeBackend) SessionTimeout() time.Duration                 { return 30 * time.Second }

// Two schedules running at once on one such Backend each skew their own
// servers' clock (ZooKeeper seed 991210: another schedule's skew failed
// every Begin of its quiet phase on the clock check).
func TestSchedulesSkewTheirOwnClocks(t *testing.T) {
	b := &zkLikeBackend{}
	one, two := scheduleBackend(b), scheduleBackend(b)
	one.SkewServerClock(t, time.Hour)
	h := &Harness{B: two}
	if d := time.Since(h.Now()); d < -time.Minute || d > time.Minute {
		t.Fatalf("a schedule's clock is %v off after another schedule skewed its own by an hour; want unskewed", d)
	}
	if d := time.Since((&Harness{B: one}).Now()); d < 59*time.Minute {
		t.Fatalf("the skewed schedule's clock is %v behind, want an hour", d)
	}
	if st, ok := two.(interface{ SessionTimeout() time.Duration }); !ok || st.SessionTimeout() != 30*time.Second {
		t.Fatal("the schedule's Backend hides the session timeout")
	}
}

package usererr

import (
	"errors"
	"testing"
	"time"
)

func TestMarks(t *testing.T) {
	base := errors.New("x")
	if Permanent(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Error("marking nil is not nil")
	}
	if !IsPermanent(Permanent(base)) || IsPermanent(base) || IsPermanent(RetryAfter(Permanent(base), 0)) {
		t.Error("IsPermanent does not follow the outermost mark")
	}
	if d, ok := RetryDelay(errors.Join(errors.New("y"), RetryAfter(base, time.Minute))); !ok || d != time.Minute {
		t.Errorf("RetryDelay through a join = %s, %v; want 1m, true", d, ok)
	}
	if d, ok := RetryDelay(RetryAfter(base, -time.Second)); !ok || d != 0 {
		t.Errorf("RetryDelay of a negative delay = %s, %v; want 0, true", d, ok)
	}
	if !errors.Is(Permanent(base), base) || !errors.Is(RetryAfter(base, 1), base) {
		t.Error("marks do not unwrap to the error")
	}
}

package dataflow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/usererr"
)

// The Node's ErrorHandler sees every error of the job's code, with its
// shard, and what it returns is what the run acts on (and reports).
func TestErrorHandlerSeesAndMarksErrors(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]error{}
	handler := func(_ context.Context, s Shard, err error) error {
		mu.Lock()
		seen[s.Item] = err
		mu.Unlock()
		return Permanent(err)
	}
	n, l := startNodeWithJob(t, NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "h", ErrorHandler: handler},
		JobConfig{JobName: "marks", ShardingTotalCount: 3, ErrorPolicy: ErrorPolicyReturn}, failSome{})
	defer stopNode(t, n)
	if err := n.TriggerLocal("marks"); err != nil {
		t.Fatal(err)
	}
	ev := l.next(t)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !errors.Is(seen[2], errBoom) {
		t.Fatalf("handler saw %v; want item 2's errBoom only", seen)
	}
	var perm *usererr.PermanentError
	if !errors.As(ev.res.Err, &perm) || !errors.Is(ev.res.Err, errBoom) {
		t.Fatalf("run error %v; want item 2's error marked permanent", ev.res.Err)
	}
}

func TestMarks(t *testing.T) {
	base := errors.New("x")
	if Permanent(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Error("marking nil is not nil")
	}
	if !usererr.IsPermanent(Permanent(base)) {
		t.Error("Permanent's mark is not read as permanent")
	}
	if d, ok := usererr.RetryDelay(RetryAfter(base, time.Minute)); !ok || d != time.Minute {
		t.Errorf("RetryAfter's mark reads %s, %v; want 1m, true", d, ok)
	}
	if !errors.Is(Permanent(base), base) || !errors.Is(RetryAfter(base, 1), base) {
		t.Error("marks do not unwrap to the error")
	}
	if err := (Shard{}).HandleError(context.Background(), base); err != base {
		t.Errorf("HandleError without a handler = %v, want the error itself", err)
	}
}

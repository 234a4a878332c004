package dataflow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/internal/testwait"
)

// endless is a streaming job that never runs out of items: each fetch
// returns the next ten numbers; every seventh fails. It counts what it
// processed.
type endless struct {
	next             atomic.Int64
	success, failure atomic.Int64
}

func (e *endless) Fetch(context.Context, Shard) ([]int64, error) {
	out := make([]int64, 10)
	for i := range out {
		out[i] = e.next.Add(1)
	}
	return out, nil
}

func (e *endless) Process(_ context.Context, _ Shard, v int64) error {
	if v%7 == 0 {
		e.failure.Add(1)
		return errors.New("every seventh fails")
	}
	e.success.Add(1)
	return nil
}

// After a graceful stop in the middle of a streaming run (and of its
// report interval, an hour long), the server's totals in status equal the
// items processed exactly: the run's Complete and the reporter's last
// report wrote them all.
func TestGracefulStopTotalsEqualItemsProcessed(t *testing.T) {
	srv := memstore.NewServer()
	sess := srv.Connect()
	defer sess.Close()
	job := &endless{}
	n, err := NewNode(NodeConfig{Store: sess, Namespace: "counts", ServerID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "endless", ShardingTotalCount: 3, StreamingProcess: true,
		ProcessCountInterval: time.Hour, ErrorPolicy: ErrorPolicyIgnore}, Job[int64](job)); err == nil {
		err = n.Start(t.Context())
	} else {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("endless"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the run under way", func() bool { return job.success.Load() > 1000 })
	stopNode(t, n)
	admin := coord.NewAdmin(srv.Connect(), "counts")
	st, err := admin.Status(t.Context(), "endless")
	if err != nil {
		t.Fatal(err)
	}
	s := st.Servers[0]
	if s.TotalSuccessCount != job.success.Load() || s.TotalFailureCount != job.failure.Load() {
		t.Fatalf("totals %d/%d after a graceful stop; want the %d/%d items processed", s.TotalSuccessCount, s.TotalFailureCount,
			job.success.Load(), job.failure.Load())
	}
	if s.CountsAsOf == nil {
		t.Fatal("countsAsOf null after the counts were written")
	}
}

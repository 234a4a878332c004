package dataflow

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
)

// stubbornJob's Process reports its ctx's cancellation on cancelled, then
// keeps running until release is closed: user code that does not honour
// ctx at once.
type stubbornJob struct {
	started   chan struct{}
	cancelled chan struct{}
	release   chan struct{}
}

func newStubbornJob() *stubbornJob {
	return &stubbornJob{started: make(chan struct{}, 1), cancelled: make(chan struct{}), release: make(chan struct{})}
}

func (j *stubbornJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }

func (j *stubbornJob) Process(ctx context.Context, _ Shard, _ int) error {
	j.started <- struct{}{}
	<-ctx.Done()
	close(j.cancelled)
	<-j.release
	return ctx.Err()
}

// startStubborn starts a Node on its own memstore hosting j as "stubborn"
// and triggers it; it returns once Process runs.
func startStubborn(t *testing.T, ctx context.Context, j *stubbornJob) (*Node, *memstore.Server) {
	t.Helper()
	srv := memstore.NewServer()
	n, err := NewNode(NodeConfig{Store: srv.Connect(memstore.WithSessionTimeout(time.Hour)), Namespace: "life", ServerID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "stubborn", ShardingTotalCount: 1}, Job[int](j)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("stubborn"); err != nil {
		t.Fatal(err)
	}
	<-j.started
	return n, srv
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Stop returns ctx.Err() at its deadline, not when the runs it cancelled
// have ended; the stop finishes in the background and Stopped says when.
func TestStopReturnsAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newStubbornJob()
		n, _ := startStubborn(t, t.Context(), j)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		began := time.Now()
		if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(began); waited != time.Minute {
			t.Errorf("Stop returned after %s, want its 1m deadline", waited)
		}
		<-j.cancelled // the run's ctx is cancelled at the deadline
		synctest.Wait()
		if isClosed(n.Stopped()) {
			t.Fatal("Stopped is closed while a run is still in Process")
		}
		close(j.release)
		<-n.Stopped()
		if err := n.Stop(t.Context()); err != nil {
			t.Errorf("a later Stop = %v, want nil", err)
		}
	})
}

// Cancelling Start's context stops the Node: the job leaves the cluster and
// Stopped is closed.
func TestStartContextEndStopsNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		srv := memstore.NewServer()
		n, err := NewNode(NodeConfig{Store: srv.Connect(memstore.WithSessionTimeout(time.Hour)), Namespace: "life", ServerID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if err := AddJob(t.Context(), n, JobConfig{JobName: "j", ShardingTotalCount: 1}, Job[int](&itemJob{})); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		<-n.Stopped()
		if err := n.TriggerLocal("j"); !errors.Is(err, ErrNodeStopped) && !errors.Is(err, ErrNoJob) {
			t.Errorf("Trigger after Start's ctx ended = %v, want ErrNodeStopped or ErrNoJob", err)
		}
		admin := srv.Connect()
		defer admin.Close()
		st, err := coord.NewAdmin(admin, "life").Status(t.Context(), "j")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Servers {
			if s.Status != "OFFLINE" {
				t.Errorf("server %s is %s after Start's ctx ended, want OFFLINE", s.ID, s.Status)
			}
		}
		if len(st.Servers) != 1 {
			t.Errorf("status lists %d servers, want the one that left", len(st.Servers))
		}
	})
}

// StopAndCancel escalates a graceful Stop in flight: the runs' contexts
// are cancelled and both calls return once the stop is done.
func TestStopAndCancelEscalatesStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newStubbornJob()
		close(j.release) // Process returns as soon as its ctx is cancelled
		n, _ := startStubborn(t, t.Context(), j)
		graceful := make(chan error, 1)
		go func() { graceful <- n.Stop(context.Background()) }()
		synctest.Wait() // Stop waits for the run, which waits for its ctx
		if isClosed(j.cancelled) {
			t.Fatal("a graceful Stop cancelled the run")
		}
		if err := n.StopAndCancel(t.Context()); err != nil {
			t.Fatalf("StopAndCancel = %v", err)
		}
		if !isClosed(j.cancelled) {
			t.Error("StopAndCancel returned but the run's ctx was not cancelled")
		}
		if err := <-graceful; err != nil {
			t.Errorf("the escalated Stop = %v, want nil", err)
		}
	})
}

// TestTriggerLocalRefusedOnceStopBegins: TriggerLocal returns
// ErrNodeStopped as soon as the stop has begun (Ready says stopping), not
// only once the stop's own goroutine has reached the scheduler: in between
// a trigger was taken and ran on a stopping Node (TestNodeStopDrains failed
// so by chance under -race at load).
func TestTriggerLocalRefusedOnceStopBegins(t *testing.T) {
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "s", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "j", ShardingTotalCount: 1}, Job[int](idleJob{})); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	n.beginStop()
	if err := n.TriggerLocal("j"); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("TriggerLocal right after the stop began: %v, want ErrNodeStopped", err)
	}
	<-n.Stopped()
}

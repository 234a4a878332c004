package dataflow

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/testsignal"
	"github.com/shardflow/shardflow/internal/testwait"
)

// holdJob's Process holds every item until release is closed, whatever
// its context says (a batch that finishes its work when allowed to).
type holdJob struct {
	entered chan struct{}
	release chan struct{}
}

func (g *holdJob) Fetch(_ context.Context, s Shard) ([]int, error) { return []int{s.Item}, nil }
func (g *holdJob) Process(context.Context, Shard, int) error {
	g.entered <- struct{}{}
	<-g.release
	return nil
}

// TestNodeStopDrains states Node.Stop's drain on two Nodes of one job
// (failover on): while A's run is in flight, A's Stop makes it not ready,
// refuses A's triggers and runs no operator trigger; the run finishes
// (its items succeed) and Stop returns nil; A leaves, so B gets every
// item at once, by a reshard while A's session is still alive (not by its
// expiry); no item is queued for failover and B's next run is a normal
// one over all items. With a grace period shorter than the run
// (cut=true), the run's context is cancelled, Stop returns
// DeadlineExceeded, and the rest is the same: the cut items are neither
// lost (B runs them next) nor run twice (no failover run beside B's).
func TestNodeStopDrains(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(map[bool]string{false: "finished", true: "cut by the grace period"}[cut], func(t *testing.T) {
			srv := memstore.NewServer()
			sig := testsignal.NewCoord()
			nodes, sessions := clusterWith(t, srv, "drain", 2, sig)
			a, b := nodes[0], nodes[1]
			defer stopNode(t, b)
			cfg := JobConfig{JobName: "drain", ShardingTotalCount: 4, Failover: true}

			gate := &holdJob{entered: make(chan struct{}, 4), release: make(chan struct{})}
			blocking := &itemJob{block: true, blocked: make(chan struct{}, 4), unblock: make(chan error, 4)}
			var aJob Job[int] = gate
			if cut {
				aJob = blocking
			}
			la, lb := newAfterListener(), newAfterListener()
			if err := AddJob(t.Context(), a, cfg, aJob, WithListeners(la)); err != nil {
				t.Fatal(err)
			}
			if err := AddJob(t.Context(), b, cfg, Job[int](&itemJob{}), WithListeners(lb)); err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes {
				if err := n.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			sig.Resharded.Wait(t, 20*time.Second, "the items spread over both servers", func(r testsignal.Resharded) bool { return len(r.Servers) == 2 })

			if err := a.TriggerLocal("drain"); err != nil {
				t.Fatal(err)
			}
			started := <-la.before
			if len(started.Items) != 2 {
				t.Fatalf("A runs items %v, want 2 of the 4", started.Items)
			}
			if cut {
				testwait.Recv(t, 20*time.Second, "A's batch in flight", blocking.blocked)
			} else {
				testwait.Recv(t, 20*time.Second, "A's batch in flight", gate.entered)
			}

			grace := 20 * time.Second
			if cut {
				grace = 50 * time.Millisecond
			}
			stopped := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				stopped <- a.Stop(ctx)
			}()
			testwait.For(t, 20*time.Second, "A to report its stop", func() bool {
				err := a.Ready()
				return errors.Is(err, ErrNotReady) && strings.Contains(err.Error(), "stopping")
			})
			if err := a.TriggerLocal("drain"); !errors.Is(err, ErrNodeStopped) {
				t.Fatalf("Trigger on a stopping Node: %v, want ErrNodeStopped", err)
			}
			adminSess := srv.Connect()
			defer adminSess.Close()
			admin := coord.NewAdmin(adminSess, "drain")
			if err := admin.Trigger(t.Context(), "drain"); err != nil {
				t.Fatal(err)
			}

			if !cut {
				close(gate.release)
			}
			err := testwait.Recv(t, 30*time.Second, "A's Stop", stopped)
			if cut != errors.Is(err, context.DeadlineExceeded) || (!cut && err != nil) {
				t.Fatalf("A's Stop: %v (cut %v)", err, cut)
			}
			ranA := la.next(t)
			if cut {
				if got := testwait.Recv(t, time.Second, "the cut batch's cancellation", blocking.unblock); !errors.Is(got, context.Canceled) {
					t.Fatalf("the cut batch saw %v, want context.Canceled", got)
				}
			} else if ranA.res.Success != 2 || ranA.res.Failure != 0 {
				t.Fatalf("A's drained run: %+v, want its 2 items done", ranA.res)
			}
			select {
			case ev := <-la.runs:
				t.Fatalf("A ran again while stopping: %+v", ev.info)
			default: // Stop has returned: no run of A can start any more
			}

			// A left: B gets every item by a reshard, A's session alive.
			sig.Resharded.Wait(t, 20*time.Second, "the reshard after A's leave", func(r testsignal.Resharded) bool {
				return slices.Equal(r.Servers, []string{"server-1"})
			})
			if s, _ := sessions[0].Session(); s.State != store.StateConnected {
				t.Fatalf("A's session is %v: the reshard must follow the leave, not an expiry", s.State)
			}
			status, err := admin.Status(t.Context(), "drain")
			if err != nil {
				t.Fatal(err)
			}
			if len(status.FailoverQueue) != 0 {
				t.Fatalf("failover queue after a graceful stop: %v", status.FailoverQueue)
			}
			for _, it := range status.Items {
				if it.Failover != "" {
					t.Fatalf("item %d failed over to %s after a graceful stop", it.Item, it.Failover)
				}
			}
			// B's runs from now on: the operator's trigger (and any other
			// queued) are normal runs over all 4 items, none a failover run.
			if err := b.TriggerLocal("drain"); err != nil {
				t.Fatal(err)
			}
			for {
				ev := lb.next(t)
				if ev.info.Reason == ReasonFailover {
					t.Fatalf("B ran a failover run after A's graceful stop: %+v", ev.info)
				}
				if len(ev.info.Items) == 4 {
					break
				}
			}
		})
	}
}

package dataflow

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
)

// A run ends while the connection is down (the session survives, as when a
// ZooKeeper member stops and the client moves to another), so its Complete
// cannot get through. Once the session resumes, the next trigger must run
// the item: the run's running nodes, ephemerals of a session that is still
// alive, kept every later Begin of its items refused as "still running"
// for as long as the process lived (integration/faults
// TestEnsembleMemberDown stalled this way 1 run in 5).
func TestNodeRunsAgainAfterSuspension(t *testing.T) {
	// A bubble, so that synctest.Wait can say "the run has ended and its
	// Complete is as far as it gets while suspended".
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.NewServer()
		sess := srv.Connect(memstore.WithSessionTimeout(time.Hour)) // never expires here
		defer sess.Close()
		job := &busyJob{block: true, started: make(chan int, 4), release: make(chan struct{})}
		n, l := startNodeWithJob(t, NodeConfig{Store: sess, Namespace: "susp", ServerID: "server-0"},
			JobConfig{JobName: "susp", ShardingTotalCount: 1}, job)
		defer stopNode(t, n)
		if err := n.TriggerLocal("susp"); err != nil {
			t.Fatal(err)
		}
		<-job.started
		sess.Disconnect()
		close(job.release)
		synctest.Wait()
		sess.Reconnect()
		// Whether that run's Complete was refused or waited for the
		// session, the next trigger must run the item.
		_ = l.next(t)

		job.block = false
		if err := n.TriggerLocal("susp"); err != nil {
			t.Fatal(err)
		}
		ev := l.next(t)
		if ev.res.Err != nil || !slices.Equal(ev.info.Items, []int{0}) || ev.res.Success != 1 {
			t.Fatalf("run after the session resumed: %+v; want item 0 run", ev)
		}
	})
}

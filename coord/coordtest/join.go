package coordtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
)

// concurrentJoinRounds returns how many processes join in each round of
// testConcurrentJoin. Round r joins a new job (r%4 even) or an existing one
// (odd), with Overwrite off (r%4 < 2) or on, so every combination of K (2
// to 10) and the four job/Overwrite cases comes up within 36 rounds: 100
// rounds on memstore, where a round costs tens of milliseconds. On real
// ZooKeeper a round costs K concurrent joins (about a second under -race on
// two cores), a reshard and K leaves: 6 rounds by default, the largest and
// smallest K among them and all four cases, keep it to about ten seconds;
// SHARDFLOW_ZK_JOIN_ROUNDS=N runs N rounds of the memstore pattern (`make
// join-zk` runs 100).
func concurrentJoinRounds(b Backend) []int {
	rounds := 100
	if _, mem := b.(*memBackend); !mem {
		v := os.Getenv("SHARDFLOW_ZK_JOIN_ROUNDS")
		if v == "" {
			return []int{10, 2, 6, 9, 3, 8}
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("coordtest: SHARDFLOW_ZK_JOIN_ROUNDS=%q: want a positive number of rounds, e.g. 100", v))
		}
		rounds = n
	}
	ks := make([]int, rounds)
	for r := range ks {
		ks[r] = 2 + r%9
	}
	return ks
}

// testConcurrentJoin: K processes (K from 2 to 10) join one job at the same
// instant, behind a barrier, on a new job and on an existing one, with
// Overwrite on and off (a Kubernetes Deployment of K replicas starting at
// once). Every join succeeds and the next trigger splits the items over all
// of them.
func testConcurrentJoin(t *testing.T, h *Harness) {
	const total = 10
	const maxK = 10
	regs := make([]*protocol.Registry, maxK)
	for i := range regs {
		reg, err := protocol.NewRegistry(h.B.Connect(t), protocol.RegistryConfig{
			Namespace: h.NS, ServerID: fmt.Sprintf("s%d", i), HostName: fmt.Sprintf("host-s%d", i),
			Logger: quietLogger(), Now: h.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = reg.Close(ctx)
		})
		regs[i] = reg
	}
	for round, k := range concurrentJoinRounds(h.B) {
		existing, overwrite := round%4&1 != 0, round%4&2 != 0
		job := fmt.Sprintf("cj%d", round)
		what := fmt.Sprintf("round %d: %d servers joining a %s job, overwrite %v", round, k, map[bool]string{true: "existing", false: "new"}[existing], overwrite)
		if existing {
			// The job exists: a server ran it before and left (it comes
			// back among the joiners, as a restarted replica does).
			pre, err := regs[maxK-1].Join(testCtx(t), Config(job, total))
			if err != nil {
				t.Fatalf("%s: first join: %v", what, err)
			}
			if err := pre.Leave(testCtx(t)); err != nil {
				t.Fatalf("%s: first leave: %v", what, err)
			}
		}
		ctx := testCtx(t)
		jobs := make([]*protocol.Job, k)
		errs := make([]error, k)
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		for i := range k {
			// Each joiner brings its own job parameter, so overwriting
			// joiners really write different data.
			cfg := Config(job, total, func(c *jobconfig.Config) {
				c.Overwrite = overwrite
				c.JobParameter = fmt.Sprintf("from-s%d", i)
			})
			wg.Go(func() {
				<-barrier
				jobs[i], errs[i] = regs[i].Join(ctx, cfg)
			})
		}
		close(barrier)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: s%d: Join: %v", what, i, err)
			}
		}
		servers := make([]*Server, k)
		for i := range k {
			servers[i] = &Server{ID: fmt.Sprintf("s%d", i), Reg: regs[i], Job: jobs[i]}
		}
		runs := BeginAll(t, servers...)
		split := AssertPartition(t, total, runs...)
		for i, items := range split {
			if len(items) == 0 {
				t.Fatalf("%s: s%d got no items at the first trigger (split %v)", what, i, split)
			}
		}
		CompleteAll(t, runs...)
		for i, j := range jobs {
			if err := j.Leave(ctx); err != nil {
				t.Fatalf("%s: s%d: Leave: %v", what, i, err)
			}
		}
	}
}

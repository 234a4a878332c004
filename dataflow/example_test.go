package dataflow_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/dataflow/dataflowtest"
)

// cities is a Job[string]: each shard item fetches the streets of its
// city (the item parameter) and Process records them.
type cities struct {
	mu   sync.Mutex
	seen []string
}

func (c *cities) Fetch(_ context.Context, s dataflow.Shard) ([]string, error) {
	return []string{s.ItemParameter + "/north", s.ItemParameter + "/south"}, nil
}

func (c *cities) Process(_ context.Context, s dataflow.Shard, street string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fmt.Sprintf("item %d: %s", s.Item, street))
	return nil
}

// done tells the example when a run has finished.
type done chan dataflow.RunResult

func (d done) BeforeRun(context.Context, dataflow.RunInfo) {}
func (d done) AfterRun(_ context.Context, _ dataflow.RunInfo, r dataflow.RunResult) {
	d <- r
}

// A basic Job on the embedded store (memstore), chosen explicitly: one
// process runs the job's shard items without ZooKeeper, as a demo or a test
// does. A fleet of processes shares a ZooKeeper ensemble (ExampleNewNode).
func ExampleAddJob() {
	ctx := context.Background()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "example"})
	if err != nil {
		panic(err)
	}
	job := &cities{}
	finished := make(done, 1)
	err = dataflow.AddJob(ctx, node, dataflow.JobConfig{
		JobName:                "cities",
		ShardingTotalCount:     2,
		ShardingItemParameters: "0=Beijing,1=Shanghai",
		// Cron: "0/5 * * * * ?" would run it every 5 seconds; here it
		// runs when triggered.
	}, dataflow.Job[string](job), dataflow.WithListeners(finished))
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	if err := node.TriggerLocal("cities"); err != nil {
		panic(err)
	}
	res := <-finished
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := node.Stop(stopCtx); err != nil {
		panic(err)
	}

	slices.Sort(job.seen)
	fmt.Println(strings.Join(job.seen, "\n"))
	fmt.Printf("success=%d failure=%d\n", res.Success, res.Failure)
	// Output:
	// item 0: Beijing/north
	// item 0: Beijing/south
	// item 1: Shanghai/north
	// item 1: Shanghai/south
	// success=4 failure=0
}

// sums is a BatchJob[int]: each shard item fetches ten numbers once, and
// ProcessBatch succeeds for the even ones.
type sums struct{}

func (sums) Fetch(_ context.Context, s dataflow.Shard) ([]int, error) {
	out := make([]int, s.FetchCount)
	for i := range out {
		out[i] = s.Item*100 + i
	}
	return out, nil
}

func (sums) ProcessBatch(_ context.Context, _ dataflow.Shard, vs []int) (int, error) {
	ok := 0
	for _, v := range vs {
		if v%2 == 0 {
			ok++
		}
	}
	return ok, nil
}

// A BatchJob tested with dataflowtest: two shard items, each batch split
// over three workers.
func ExampleAddBatchJob() {
	cfg := dataflow.JobConfig{JobName: "sums", ShardingTotalCount: 2, FetchDataCount: 10, ConcurrentDataProcessThreadCount: 3}
	res, err := dataflowtest.RunBatch(context.Background(), cfg, dataflow.BatchJob[int](sums{}))
	fmt.Printf("success=%d failure=%d err=%v\n", res.Success, res.Failure, err)
	// Output:
	// success=10 failure=10 err=<nil>
}

// A simple job: one function call per shard item per trigger, with the
// same coordination, fencing and counting as a dataflow job. Without a
// Cron it is a one-off job, run when triggered (TriggerAll runs it on every
// server of the job). ItemTimeout bounds each item's call.
func ExampleAddSimpleJob() {
	ctx := context.Background()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "example"})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var lines []string
	finished := make(done, 1)
	err = dataflow.AddSimpleJob(ctx, node, dataflow.JobConfig{
		JobName:                "report",
		ShardingTotalCount:     3,
		ShardingItemParameters: "0=eu,1=us,2=asia",
		ItemTimeout:            time.Minute,
	}, func(ctx context.Context, s dataflow.Shard) error {
		if err := s.CheckOwnership(ctx); err != nil {
			return err // another server owns the item now
		}
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf("report %d/%d for %s", s.Item, s.Total, s.ItemParameter))
		return nil
	}, dataflow.WithListeners(finished))
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	if err := node.TriggerAll(ctx, "report"); err != nil {
		panic(err)
	}
	res := <-finished
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := node.Stop(stopCtx); err != nil {
		panic(err)
	}

	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("success=%d failure=%d\n", res.Success, res.Failure)
	// Output:
	// report 0/3 for eu
	// report 1/3 for us
	// report 2/3 for asia
	// success=3 failure=0
}

// A Node in production: every replica of the service opens a session on the
// same ZooKeeper ensemble and adds the same jobs; ZooKeeper decides which
// replica owns which shard item, and moves a stopped or crashed replica's
// items to the others. The server id is the pod's name (a StatefulSet keeps
// it across restarts). SIGTERM ends ctx, which drains the Node: no new runs,
// the runs in progress finish, then the replica leaves and its items are
// resharded at once. (Not run here: it needs a ZooKeeper ensemble.)
func ExampleNewNode() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	zk, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{"zk-0:2181", "zk-1:2181", "zk-2:2181"}})
	if err != nil {
		log.Fatal(err) // names the servers it could not reach
	}
	defer zk.Close()
	node, err := dataflow.NewNode(dataflow.NodeConfig{
		Store:    zk,
		ServerID: os.Getenv("POD_NAME"),
		// A replica replaced under a new id (a Deployment) is listed
		// OFFLINE until its leader prunes it after this grace.
		OfflineServerGrace: 10 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = dataflow.AddJob(ctx, node, dataflow.JobConfig{
		JobName:                "cities",
		Cron:                   "0 */5 * * * ?", // every five minutes
		ShardingTotalCount:     2,
		ShardingItemParameters: "0=Beijing,1=Shanghai",
		Failover:               true, // a crashed replica's running items run again at once
	}, dataflow.Job[string](&cities{}))
	if err != nil {
		log.Fatal(err) // a bad config names the field
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	grace, cancel := context.WithTimeout(context.Background(), 25*time.Second) // below terminationGracePeriodSeconds
	defer cancel()
	if err := node.Stop(grace); err != nil {
		log.Print(err) // the grace ended: the runs were cancelled
		<-node.Stopped()
	}
}

// Command embedded is the smallest complete shardflow program: one process,
// the embedded coordination store (no ZooKeeper), a streaming Job[T] over an
// in-memory source on a cron schedule, Prometheus metrics on /metrics, and a
// graceful stop on SIGINT/SIGTERM.
//
//	go run ./examples/embedded            # then curl localhost:9464/metrics
//	go run ./examples/embedded -once      # one run, print the counts, exit
//
// Swap NodeConfig.Store for a coord/zkstore session and start the same
// program on several hosts: the job's shard items spread over them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sinks/memsink"
	"github.com/shardflow/shardflow/sources/memory"
)

// Invoice is the item type of the job.
type Invoice struct {
	Customer string
	Cents    int64
}

// settle is a dataflow.Job[memory.Record[Invoice]]: Fetch claims pending
// invoices of the shard item, Process books one and marks it done.
type settle struct {
	src    *memory.Source[Invoice]
	ledger *memsink.Sink[int64]
	booked atomic.Int64
}

func (s *settle) Fetch(ctx context.Context, sh dataflow.Shard) ([]memory.Record[Invoice], error) {
	return s.src.Fetch(ctx, sh)
}

func (s *settle) Process(ctx context.Context, sh dataflow.Shard, r memory.Record[Invoice]) error {
	if r.Value.Cents < 0 {
		_ = s.src.Fail(sh, r.ID)
		return fmt.Errorf("invoice %d of %s: negative amount %d", r.ID, r.Value.Customer, r.Value.Cents)
	}
	if err := s.ledger.Write(ctx, sh, r.ID); err != nil { // fenced by the shard's epoch
		_ = s.src.Release(sh, r.ID)
		return err
	}
	s.booked.Add(r.Value.Cents)
	return s.src.Done(sh, r.ID)
}

// doneListener signals after each run.
type doneListener chan dataflow.RunResult

func (doneListener) BeforeRun(context.Context, dataflow.RunInfo) {}
func (d doneListener) AfterRun(_ context.Context, _ dataflow.RunInfo, r dataflow.RunResult) {
	select {
	case d <- r:
	default:
	}
}

func main() {
	once := flag.Bool("once", false, "trigger one run, print the counts and exit")
	listen := flag.String("metrics", "127.0.0.1:9464", "address of the Prometheus /metrics endpoint")
	flag.Parse()
	sum, err := run(*once, *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
	if *once {
		fmt.Printf("run: success=%d failure=%d booked=%d cents, ledger %d entries, %d duplicate\n",
			sum.success, sum.failure, sum.bookedCents, sum.ledgerEntries, sum.duplicates)
	}
}

// summary is what one -once run did.
type summary struct {
	success, failure, bookedCents int64
	ledgerEntries, duplicates     int
}

func run(once bool, listen string) (sum summary, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	src := memory.NewSource[Invoice]()
	for i := int64(0); i < 10_000; i++ {
		cents := 100 + i%900
		if i%2500 == 0 {
			cents = -1 // a bad invoice: counted as a failure, the others go on
		}
		if err := src.Add(memory.Record[Invoice]{ID: i, Value: Invoice{Customer: fmt.Sprintf("c%d", i%37), Cents: cents}}); err != nil {
			return sum, err
		}
	}
	job := &settle{src: src, ledger: memsink.NewSink[int64]()}

	reg := prometheus.NewRegistry()
	// The embedded store, chosen explicitly: one process, no cluster.
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "embedded-1", Metrics: reg})
	if err != nil {
		return sum, err
	}
	finished := make(doneListener, 1)
	cfg := dataflow.JobConfig{
		JobName:                          "settle-invoices",
		Cron:                             "0/10 * * * * ?",
		ShardingTotalCount:               4,
		ShardingItemParameters:           "0=eu,1=us,2=apac,3=latam",
		FetchDataCount:                   250,
		ConcurrentDataProcessThreadCount: 4,
		StreamingProcess:                 true,
		ProcessCountInterval:             10 * time.Second,
	}
	if err := dataflow.AddJob[memory.Record[Invoice]](ctx, node, cfg, job, dataflow.WithListeners(finished)); err != nil {
		return sum, err
	}
	if err := node.Start(ctx); err != nil {
		return sum, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Stop(stopCtx); err != nil {
			slog.Error("stop", "err", err)
		}
	}()

	if once {
		if err := node.TriggerLocal(cfg.JobName); err != nil {
			return sum, err
		}
		select {
		case r := <-finished:
			return summary{success: r.Success, failure: r.Failure, bookedCents: job.booked.Load(),
				ledgerEntries: job.ledger.Distinct(), duplicates: job.ledger.Duplicates()}, nil
		case <-ctx.Done():
			return sum, ctx.Err()
		}
	}

	srv := &http.Server{Addr: listen, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics endpoint", "err", err)
			stop()
		}
	}()
	fmt.Printf("job %q runs every 10 s; metrics on http://%s/metrics; Ctrl-C to stop\n", cfg.JobName, listen)
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return sum, srv.Shutdown(shutdownCtx)
}

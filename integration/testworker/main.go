// Command testworker is a shardflow worker process for the fault suites in
// integration/faults: one dataflow job on one Node over a ZooKeeper session,
// committing its work to a fenced ledger in ZooKeeper, and
// reporting what it does as JSON lines on stdout so a test can audit
// ownership, failover and fencing from the outside while it kills, pauses and
// cuts off workers.
//
// Output protocol, one JSON object per line, written at once (unbuffered):
//
//	{"ev":"ready","server":id,"t":ms}                       node started, job joined
//	{"ev":"begin","server":id,"item":i,"epoch":e,"failover":b,"t":ms}
//	{"ev":"commit","server":id,"item":i,"epoch":e,"seq":n,"checked":ms,"t":ms}
//	{"ev":"fenced","server":id,"item":i,"epoch":e,"reason":"ownership|ledger","err":"...","t":ms}
//	{"ev":"end","server":id,"item":i,"epoch":e,"reason":"done|cancelled|...","t":ms}
//	{"ev":"once","server":id,"phase":"started|completed","t":ms}
//	{"ev":"session","server":id,"reason":"connected|suspended|lost|...","seq":sessionID,"t":ms}
//	{"ev":"error","server":id,"err":"...","t":ms}
//	{"ev":"stopped","server":id,"t":ms}                     graceful stop done
//
// The job is hosted by a dataflow.Node. Each processed tick is committed to
// the ledger (see ledger): Shard.CheckOwnership first, then a write that
// ZooKeeper applies only if no larger epoch was committed for the item. A
// "commit" is printed only for an accepted write ("checked" is when its
// ownership check started); a refusal by either check prints "fenced" with reason "ownership"
// or "ledger". The ledger, ledgerRoot/{namespace}/{job}/{item}/c-{server}-{epoch}-{seq}, is
// the record the suites audit. t is Unix milliseconds.
//
// SIGTERM or SIGINT stops the Node gracefully (running items finish their
// current batch) and exits 0; a failure to start exits 1.
//
// Usage:
//
//	testworker --zk 127.0.0.1:2181 --namespace ns --job j --server-id w1 \
//	    [--total 8] [--cron '* * * * * ?'] [--session-timeout 2s] [--failover] \
//	    [--streaming] [--run 0s] [--misfire=true] [--overwrite] [--once]
//
// --coord postgres://... instead of --zk puts the coordination and the
// ledger on Postgres (coord/pgstore).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
)

// options are the worker's flags.
type options struct {
	zk             string
	coord          string
	namespace      string
	job            string
	serverID       string
	total          int
	cron           string
	sessionTimeout time.Duration
	connectTimeout time.Duration
	failover       bool
	streaming      bool
	runFor         time.Duration
	processDelay   time.Duration
	batch          int
	threads        int
	misfire        bool
	overwrite      bool
	once           bool
	onceTimeout    time.Duration
	stopTimeout    time.Duration
	logLevel       string

	ledgerSessionTimeout time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("testworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.zk, "zk", "", "ZooKeeper servers, comma-separated host:port (this or --coord)")
	fs.StringVar(&o.coord, "coord", "", "the coordination store as coord/connect takes it (a postgres:// URL, or ZooKeeper servers); instead of --zk")
	fs.StringVar(&o.namespace, "namespace", "shardflow", "namespace of the job")
	fs.StringVar(&o.job, "job", "faultjob", "job name")
	fs.StringVar(&o.serverID, "server-id", "", "server id of this worker (required)")
	fs.IntVar(&o.total, "total", 8, "shardingTotalCount")
	fs.StringVar(&o.cron, "cron", "* * * * * ?", "cron with seconds; every second by default")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 2*time.Second, "ZooKeeper session timeout")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "how long to wait for the first ZooKeeper session")
	fs.BoolVar(&o.failover, "failover", false, "enable failover")
	fs.BoolVar(&o.streaming, "streaming", false, "streamingProcess: fetch until --run has elapsed")
	fs.DurationVar(&o.runFor, "run", 0, "how long each item's run lasts (with --streaming: Fetch returns batches until it elapsed)")
	fs.DurationVar(&o.processDelay, "process-delay", 20*time.Millisecond, "how long each Process call sleeps before its fenced commit")
	fs.IntVar(&o.batch, "batch", 2, "fetchDataCount: ticks per Fetch")
	fs.IntVar(&o.threads, "threads", 2, "concurrentDataProcessThreadCount")
	fs.BoolVar(&o.misfire, "misfire", true, "misfire: one catch-up run after an overlapped trigger")
	fs.BoolVar(&o.overwrite, "overwrite", false, "overwrite the stored config with this one")
	fs.BoolVar(&o.once, "once", false, "add a distribute-once listener printing \"once\" events")
	fs.DurationVar(&o.onceTimeout, "once-timeout", 4*time.Second, "distribute-once started/completed timeout")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 20*time.Second, "bound of the graceful stop on SIGTERM")
	fs.DurationVar(&o.ledgerSessionTimeout, "ledger-session-timeout", 20*time.Second, "ZooKeeper session timeout of the ledger's own session")
	fs.StringVar(&o.logLevel, "log-level", "info", "stderr log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case (o.zk == "") == (o.coord == ""):
		return o, errors.New("one of --zk (ZooKeeper servers as host:port[,host:port]) and --coord is required")
	case o.serverID == "":
		return o, errors.New("--server-id is required: each worker needs a distinct id")
	case o.total <= 0:
		return o, fmt.Errorf("--total %d: must be > 0", o.total)
	}
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testworker: %v\n", err)
		os.Exit(1)
	}
}

// run starts the worker and blocks until ctx ends (a signal), then stops it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", o.logLevel, err)
	}
	// The Node adds server to its lines; the worker's own lines add it here.
	nodeLogger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	logger := nodeLogger.With("server", o.serverID)
	em := newEmitter(stdout, o.serverID)

	st, err := o.open(ctx, o.sessionTimeout, logger)
	if err != nil {
		em.errorf(err)
		return err
	}
	defer st.Close()

	watchDone := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(context.Background())
	go func() {
		defer close(watchDone)
		watchSession(watchCtx, st, em)
	}()
	defer func() { stopWatch(); <-watchDone }()

	// The ledger, the worker's fenced sink, is a system of its own: its own
	// session, with a long timeout, so that a paused worker's stale write
	// does reach it after the pause and is refused by the epoch check.
	lst, err := o.open(ctx, o.ledgerSessionTimeout, logger.With("session", "ledger"))
	if err != nil {
		em.errorf(err)
		return fmt.Errorf("the ledger's session: %w", err)
	}
	defer lst.Close()

	job := newTickJob(em, newLedger(lst, o.namespace, o.job, o.serverID), o.runFor, o.processDelay, o.batch)
	node, err := startNode(ctx, st, o, em, job, nodeLogger)
	if err != nil {
		em.errorf(err)
		return err
	}
	em.emit(event{Ev: "ready"})

	<-ctx.Done()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), o.stopTimeout)
	defer cancelStop()
	if err := node.Stop(stopCtx); err != nil {
		em.errorf(fmt.Errorf("graceful stop: %w", err))
	}
	em.emit(event{Ev: "stopped"})
	return nil
}

// open opens a session on the worker's store (--zk or --coord) with
// timeout.
func (o options) open(ctx context.Context, timeout time.Duration, logger *slog.Logger) (store.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	if o.coord != "" {
		st, err := connect.Open(ctx, connect.Config{Coord: o.coord, SessionTimeout: timeout, ConnectTimeout: o.connectTimeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", connect.Describe(o.coord), err)
		}
		return st, nil
	}
	st, err := zkstore.Open(ctx, zkstore.Config{
		Servers:        strings.Split(o.zk, ","),
		SessionTimeout: timeout,
		ConnectTimeout: o.connectTimeout,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper %s: %w", o.zk, err)
	}
	return st, nil
}

// watchSession prints a "session" event at every change of the store's
// session (state or id) until ctx ends.
func watchSession(ctx context.Context, st store.Store, em *emitter) {
	var last store.Session
	for {
		s, changed := st.Session()
		if s != last {
			em.emit(event{Ev: "session", Reason: s.State.String(), Seq: s.ID})
			last = s
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

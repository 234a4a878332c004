package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
)

// jobConfig builds the job's config from the flags.
func jobConfig(o options) dataflow.JobConfig {
	return dataflow.JobConfig{
		JobName:                          o.job,
		Cron:                             o.cron,
		ShardingTotalCount:               o.total,
		FetchDataCount:                   o.batch,
		ConcurrentDataProcessThreadCount: o.threads,
		StreamingProcess:                 o.streaming,
		Failover:                         o.failover,
		Misfire:                          jobconfig.Bool(o.misfire),
		Overwrite:                        o.overwrite,
		// Counts are irrelevant to the fault suites; keep the writes rare.
		ProcessCountIntervalSeconds: 60,
		ReconcileIntervalSeconds:    5,
	}
}

// coordHost runs one job directly on the coord protocol and the dataflow
// pipeline engine, following the trigger sequence of ARCHITECTURE.md ("One
// trigger, as data flows"): Begin -> distribute-once "started" -> RunJob
// over the run's shards (fenced by Run.CheckOwnership) -> "completed" ->
// Complete -> misfire catch-up -> failover claim. It stands in for
// dataflow.Node until that lands, so the suites exercise the protocol on
// real ZooKeeper; it is the worker's only host, not a library.
//
// One goroutine (loop) owns every run; stop cancels it and waits.
type coordHost struct {
	o      options
	em     *emitter
	job    *tickJob
	logger *slog.Logger
	reg    *coord.Registry
	cj     *coord.Job

	stopping chan struct{}      // closed by stop: no new runs, streaming loops end
	cancel   context.CancelFunc // cancels the runs' context: a hard stop
	done     chan struct{}
	once     sync.Once
}

func (h *coordHost) isStopping() bool {
	select {
	case <-h.stopping:
		return true
	default:
		return false
	}
}

func startCoordHost(ctx context.Context, st store.Store, o options, em *emitter, job *tickJob, logger *slog.Logger) (*coordHost, error) {
	reg, err := coord.NewRegistry(st, coord.RegistryConfig{Namespace: o.namespace, ServerID: o.serverID, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("coord registry: %w", err)
	}
	cfg := jobConfig(o).WithDefaults()
	if err := cfg.Validate(); err != nil {
		_ = reg.Close(context.Background())
		return nil, fmt.Errorf("job config: %w", err)
	}
	var cj *coord.Job
	// The previous incarnation of this server id may still hold its
	// session (a restart right after a crash): retry until it expires.
	for {
		cj, err = reg.Join(ctx, cfg)
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrServerIDInUse) || ctx.Err() != nil {
			_ = reg.Close(context.Background())
			return nil, fmt.Errorf("join job %s: %w", o.job, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	h := &coordHost{o: o, em: em, job: job, logger: logger, reg: reg, cj: cj, stopping: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.loop(loopCtx)
	}()
	return h, nil
}

// stop is graceful: no new runs, the current run's streaming loops end
// after their batch, then the job is left. When ctx ends first the run is
// cancelled (hard stop) and waited for.
func (h *coordHost) stop(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		close(h.stopping)
		select {
		case <-h.done:
		case <-ctx.Done():
			err = ctx.Err()
			h.cancel()
			<-h.done
		}
		defer h.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if lerr := h.cj.Leave(ctx); lerr != nil {
			err = lerr
		}
		if cerr := h.reg.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	})
	return err
}

// loop waits for the next fire time or a signal and runs the job.
func (h *coordHost) loop(ctx context.Context) {
	sched, next := h.schedule(time.Now())
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.stopping:
			return
		case <-timer.C:
			h.runAll(ctx, next)
		case sig, ok := <-h.cj.Signals():
			if !ok {
				return
			}
			switch sig {
			case coord.SignalConfigChanged:
				sched, next = h.schedule(time.Now())
				timer.Reset(time.Until(next))
				continue
			case coord.SignalTrigger, coord.SignalFailover:
				h.runAll(ctx, next)
			case coord.SignalShutdown, coord.SignalRemoved:
				h.em.emit(event{Ev: "error", Err: fmt.Sprintf("job signal %d: stopping", sig)})
				return
			}
		}
		now := time.Now()
		if sched != nil {
			next = sched.Next(now)
		}
		timer.Reset(time.Until(next))
	}
}

// schedule parses the stored cron; no cron means only triggers (a far timer).
func (h *coordHost) schedule(now time.Time) (cron.Schedule, time.Time) {
	expr := h.cj.Config().Cron
	if expr == "" {
		return nil, now.Add(24 * time.Hour)
	}
	s, err := jobconfig.ParseCron(expr)
	if err != nil {
		h.em.errorf(fmt.Errorf("cron %q: %w", expr, err))
		return nil, now.Add(24 * time.Hour)
	}
	return s, s.Next(now)
}

// runAll runs once, then the misfire catch-up and failover claims.
func (h *coordHost) runAll(ctx context.Context, next time.Time) {
	for ctx.Err() == nil && !h.isStopping() {
		h.runOnce(ctx, next)
		if again, err := h.cj.TakeMisfire(ctx); err == nil && again {
			continue
		}
		if claimed, err := h.cj.ClaimFailover(ctx); err == nil && claimed {
			continue
		}
		return
	}
}

func (h *coordHost) runOnce(ctx context.Context, next time.Time) {
	run, err := h.cj.Begin(ctx, time.Now())
	switch {
	case err == nil:
	case errors.Is(err, coord.ErrItemsRunning), errors.Is(err, coord.ErrPaused), ctx.Err() != nil:
		return
	default:
		h.em.errorf(fmt.Errorf("begin: %w", err))
		return
	}
	cfg := h.cj.Config()
	params, _ := jobconfig.ParseItemParameters(cfg.ShardingItemParameters, cfg.ShardingTotalCount)
	var items []int
	var shards []dataflow.Shard
	for _, a := range run.Shards() {
		items = append(items, a.Item)
		item := a.Item
		shards = append(shards, dataflow.Shard{
			JobName: cfg.JobName, Item: a.Item, Total: cfg.ShardingTotalCount,
			ItemParameter: params[a.Item], JobParameter: cfg.JobParameter,
			FetchCount: cfg.FetchDataCount, Epoch: a.Epoch, Failover: a.Failover,
		}.WithFence(func(ctx context.Context) error { return run.CheckOwnership(ctx, item) }))
	}
	rctx := run.Context()
	h.job.runStarted()
	if h.o.once && len(items) > 0 {
		h.onceCall(rctx, "started", items)
	}
	res := dataflow.RunJob[tick](rctx, h.job, shards, dataflow.PipelineConfig{
		JobName: cfg.JobName, Threads: cfg.ConcurrentDataProcessThreadCount, Streaming: cfg.StreamingProcess,
		KeepGoing: func() bool { return !h.isStopping() && run.KeepGoing() }, ErrorPolicy: dataflow.ErrorPolicyIgnore, Logger: h.logger,
	})
	if h.o.once && len(items) > 0 {
		h.onceCall(rctx, "completed", items)
	}
	reason := "done"
	if rctx.Err() != nil {
		reason = "cancelled"
	}
	h.job.runEnded(reason)
	_ = res
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run.Complete(cctx, next); err != nil && rctx.Err() == nil {
		h.em.errorf(fmt.Errorf("complete: %w", err))
	}
}

func (h *coordHost) onceCall(ctx context.Context, phase string, items []int) {
	err := h.cj.Once(ctx, phase, items, h.o.onceTimeout, func(context.Context) error {
		h.em.emit(event{Ev: "once", Phase: phase})
		return nil
	})
	if err != nil {
		h.em.errorf(fmt.Errorf("once %s: %w", phase, err))
	}
}

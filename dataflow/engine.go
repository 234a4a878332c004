package dataflow

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// outcomeCounter receives outcome counts from the pipeline. stats.Counter
// implements it. Add is called concurrently from many workers, once per
// processed chunk (not per item), so it must be safe for concurrent use.
type outcomeCounter interface {
	Add(success, failure int64)
}

// pipelineConfig configures one run of the pipeline engine (runJob and
// runBatchJob). Zero fields take the stated defaults.
type pipelineConfig struct {
	// JobName names the job in errors and logs.
	JobName string
	// Threads is the number of workers per shard item
	// (ConcurrentDataProcessThreadCount). Default 2 x GOMAXPROCS.
	Threads int
	// Streaming keeps fetching after each processed batch until a fetch
	// returns nothing, KeepGoing says no, or ctx ends. Default false: one
	// fetch per shard item.
	Streaming bool
	// PipelinedFetch (streaming only) overlaps the next Fetch of a shard
	// item with the processing of its current batch, so that workers do
	// not sit idle while an I/O-bound Fetch runs. KeepGoing is then checked
	// before each next Fetch starts, and a batch once fetched is processed
	// (unless ctx ends). Fetch must not depend on the current batch being
	// processed (a cursor, not "rows still pending"). Default false: fetch,
	// process the whole batch, then fetch again (ElasticJob's semantics).
	PipelinedFetch bool
	// KeepGoing is checked between streaming batches; nil means always.
	// It is called concurrently from the shard items' goroutines.
	KeepGoing func() bool
	// Counter receives the outcome counts; nil discards them (RunResult
	// still carries the totals).
	Counter outcomeCounter
	// ErrorPolicy decides what happens to each shard item's first error.
	// Default ErrorPolicyLog.
	ErrorPolicy ErrorPolicy
	// Logger receives errors under ErrorPolicyLog. Default slog.Default().
	Logger *slog.Logger
	// ItemTimeout bounds each shard item's run (JobConfig.ItemTimeout):
	// when it passes the item's context is cancelled with a *TimeoutError
	// cause, which becomes the item's error, and the item counts one
	// failure (besides those of calls the cancel made fail). Default 0: no
	// limit.
	ItemTimeout time.Duration
	// Tracer, when set, gets a span per shard item (under ctx's span), per
	// Fetch and per processed batch; see SpanItem. Default nil: no spans.
	Tracer trace.Tracer
}

// RunResult is the outcome of one run.
type RunResult struct {
	// Success and Failure are the counted outcomes of the run.
	Success, Failure int64
	// Items has one entry per shard item of the run, in the order of the
	// shards given (failover items first).
	Items []ItemResult
	// Err is nil unless the job's ErrorPolicy is ErrorPolicyReturn and user
	// code failed: then it joins one *ItemError per failing shard item, in
	// item order. Under the other policies errors are logged or dropped.
	// The Node also puts coordination errors here (e.g. a failed Complete).
	Err error
	// Started is when the run began; Duration how long it took.
	Started  time.Time
	Duration time.Duration
}

// runJob runs job over shards, the engine under Node: every shard item runs
// concurrently in its own goroutine, which fetches up to shard.FetchCount
// items and hands them to up to cfg.Threads workers, then, when streaming,
// fetches again. It blocks until every shard item has finished.
//
// Cancelling ctx stops fetching and stops handing out items at once; calls
// already in progress get ctx and are waited for. Items that were fetched
// but not handed out are counted neither as successes nor as failures.
//
// A Process error counts one failure and processing goes on; the first
// error of each shard item is kept and handled by cfg.ErrorPolicy. A panic
// in Fetch or Process is recovered as a *PanicError: in Process it counts
// one failure, in Fetch one failure and it ends that shard item's run.
func runJob[T any](ctx context.Context, job Job[T], shards []Shard, cfg pipelineConfig) RunResult {
	e := newEngine[T](cfg)
	e.fetch = job.Fetch
	e.job = job
	return e.run(ctx, shards)
}

// runBatchJob is runJob for a BatchJob: each fetched batch is split into at
// most cfg.Threads contiguous slices of near-equal length, processed
// concurrently by ProcessBatch. A slice counts succeeded successes and
// len-succeeded failures, less the items a *Skipped error says it skipped
// (counted neither); another non-nil error or a panic counts the whole
// slice as failed.
func runBatchJob[T any](ctx context.Context, job BatchJob[T], shards []Shard, cfg pipelineConfig) RunResult {
	e := newEngine[T](cfg)
	e.fetch = job.Fetch
	e.batch = job
	return e.run(ctx, shards)
}

// engine is one run of the pipeline. Exactly one of job and batch is set.
type engine[T any] struct {
	cfg   pipelineConfig
	fetch func(context.Context, Shard) ([]T, error)
	job   Job[T]
	batch BatchJob[T]
}

func newEngine[T any](cfg pipelineConfig) *engine[T] {
	if cfg.Threads <= 0 {
		cfg.Threads = 2 * runtime.GOMAXPROCS(0)
	}
	if cfg.ErrorPolicy == "" {
		cfg.ErrorPolicy = ErrorPolicyLog
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &engine[T]{cfg: cfg}
}

func (e *engine[T]) run(ctx context.Context, shards []Shard) RunResult {
	res := RunResult{Started: time.Now()}
	items := make([]itemRun[T], len(shards))
	res.Items = runItems(ctx, shards, e.cfg, func(ctx context.Context, i int) itemOutcome {
		r := &items[i]
		r.e, r.shard = e, shards[i]
		r.shard.Threads = e.cfg.Threads
		r.run(ctx)
		o := itemOutcome{success: r.success.Load(), failure: r.failure.Load()}
		if ie := r.err.Load(); ie != nil {
			o.err = ie
		}
		return o
	})

	for _, it := range res.Items {
		res.Success += it.Success
		res.Failure += it.Failure
	}
	res.Duration = time.Since(res.Started)
	var errs []error
	for i := range items {
		ie := items[i].err.Load()
		if ie == nil {
			continue
		}
		switch e.cfg.ErrorPolicy {
		case ErrorPolicyReturn:
			errs = append(errs, ie)
		case ErrorPolicyIgnore:
		default:
			attrs := []any{"job", ie.Job, "item", ie.Item, "op", ie.Op, "err", ie.Err}
			var pe *PanicError
			if errors.As(ie.Err, &pe) {
				attrs = append(attrs, "stack", string(pe.Stack))
			}
			e.cfg.Logger.ErrorContext(ctx, "dataflow: shard item failed", attrs...)
		}
	}
	res.Err = errors.Join(errs...)
	return res
}

// itemRun is one shard item's run: an owner goroutine (run) that fetches and
// dispatches, and up to Threads workers started on demand, which receive
// chunks of a pass on work. The owner is the only sender on work and closes
// it; it waits for the workers before returning.
type itemRun[T any] struct {
	e     *engine[T]
	shard Shard
	err   atomic.Pointer[ItemError]
	// success and failure are this item's share of the engine's counts.
	success, failure atomic.Int64

	work    chan chunkRef[T]
	workers sync.WaitGroup
	started int
	// passes are the batches being processed: passes[0] only, or both
	// alternately with PipelinedFetch (the next batch is handed out
	// while the tail of the current one is still processed).
	passes [2]pass[T]
}

// chunkRef is one chunk of a pass, as handed to a worker.
type chunkRef[T any] struct {
	p     *pass[T]
	chunk int
}

// pass is one fetched batch being processed. The owner sets its fields
// before sending the first chunk (the send publishes them) and reads or
// reuses them again only after wg.Wait.
type pass[T any] struct {
	items  []T
	chunks int   // chunks handed out: 0..chunks-1
	ends   []int // the chunks' ends when the job cut the batch (BatchSlicer), else nil
	stride int64 // items claimed per cursor step (per-item jobs)
	wg     sync.WaitGroup
	// ctx and span are the batch's process span (nil without tracing);
	// the workers' calls get ctx.
	ctx  context.Context
	span trace.Span
	// next is the cursor into items (per-item jobs), on its own cache line:
	// workers bump it while reading the fields above on every claim.
	_    [64]byte
	next atomic.Int64
	_    [56]byte
}

func (r *itemRun[T]) recordErr(ctx context.Context, op string, err error) {
	// The Node's ErrorHandler sees every error of user code, the first
	// one of the item's run is recorded.
	err = r.shard.HandleError(ctx, err)
	if r.err.Load() != nil {
		return
	}
	r.err.CompareAndSwap(nil, &ItemError{Job: r.e.cfg.JobName, Item: r.shard.Item, Op: op, Err: err})
}

func (r *itemRun[T]) run(ctx context.Context) {
	ctx, finish := r.withItemTimeout(ctx)
	defer finish()
	defer func() {
		if r.work != nil {
			close(r.work)
			r.workers.Wait()
		}
		r.passes[0].items, r.passes[1].items = nil, nil
	}()
	if r.e.cfg.Streaming && r.e.cfg.PipelinedFetch {
		r.runPipelined(ctx)
		return
	}
	for ctx.Err() == nil {
		items, err := r.callFetch(ctx)
		if err != nil {
			r.recordErr(ctx, "fetch", err)
			return
		}
		if len(items) == 0 {
			return
		}
		r.dispatch(ctx, items)
		if !r.e.cfg.Streaming || !r.keepGoing() {
			return
		}
	}
}

func (r *itemRun[T]) keepGoing() bool {
	return r.e.cfg.KeepGoing == nil || r.e.cfg.KeepGoing()
}

// runPipelined is the streaming loop with PipelinedFetch. The owner hands
// batch k to the workers and, while they process it, fetches batch k+1 and
// hands it out too, then waits for batch k, then fetches batch k+2: Fetch
// overlaps processing, and workers that finish their share of batch k go
// on with batch k+1 instead of waiting for batch k's slowest item. At most
// two batches are handed out at a time, and KeepGoing is checked before
// every Fetch after the first.
func (r *itemRun[T]) runPipelined(ctx context.Context) {
	var prev *pass[T] // handed out and not yet waited for
	defer func() {
		if prev != nil {
			prev.wg.Wait()
			endProcessSpan(prev)
		}
	}()
	if ctx.Err() != nil {
		return
	}
	items, err := r.callFetch(ctx)
	for {
		if err != nil {
			r.recordErr(ctx, "fetch", err)
			return
		}
		if len(items) == 0 || ctx.Err() != nil {
			return
		}
		p := &r.passes[0]
		if p == prev {
			p = &r.passes[1]
		}
		r.setPass(p, items)
		r.startProcessSpan(ctx, p)
		r.handOut(ctx, p, 2)
		if prev != nil {
			prev.wg.Wait()
			endProcessSpan(prev)
		}
		prev = p
		if ctx.Err() != nil || !r.keepGoing() {
			return
		}
		items, err = r.callFetch(ctx)
	}
}

func (r *itemRun[T]) callFetch(ctx context.Context) (items []T, err error) {
	ctx, span := r.startFetchSpan(ctx)
	if span != nil {
		defer func() {
			span.SetAttributes(attrBatch.Int(len(items)))
			endSpan(span, 0, 0, err)
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			r.count(0, 1)
			items, err = nil, newPanicError("fetch", v)
		}
	}()
	return r.e.fetch(ctx, r.shard)
}

// dispatch processes one fetched batch and returns when every handed-out
// chunk is done. A batch that needs one chunk is processed on the owner's
// goroutine without a hand-off.
func (r *itemRun[T]) dispatch(ctx context.Context, items []T) {
	p := &r.passes[0]
	r.setPass(p, items)
	r.startProcessSpan(ctx, p)
	defer endProcessSpan(p)
	if p.chunks == 1 {
		r.processChunk(ctx, p, 0)
		return
	}
	r.handOut(ctx, p, 1)
	p.wg.Wait()
}

// setPass makes items the batch of p, cut as a BatchSlicer job says, else
// into at most Threads near-equal chunks.
func (r *itemRun[T]) setPass(p *pass[T], items []T) {
	setPass(p, items, r.e.cfg.Threads)
	if s, ok := r.e.batch.(BatchSlicer[T]); ok && len(items) > 0 {
		if ends := s.Slices(r.shard, items); validEnds(ends, len(items), r.e.cfg.Threads) {
			p.chunks, p.ends = len(ends), ends
		}
	}
}

// validEnds reports whether ends cut n items into at most threads
// non-empty slices (see BatchSlicer).
func validEnds(ends []int, n, threads int) bool {
	if len(ends) == 0 || len(ends) > threads || ends[len(ends)-1] != n {
		return false
	}
	prev := 0
	for _, e := range ends {
		if e <= prev {
			return false
		}
		prev = e
	}
	return true
}

// setPass makes items the batch of p, cut into at most threads chunks.
func setPass[T any](p *pass[T], items []T, threads int) {
	p.items, p.ends = items, nil
	p.chunks = min(threads, len(items))
	p.next.Store(0)
	// Per-item jobs claim items in strides, about four per worker and pass:
	// a slow item holds back at most its stride, and the shared cursor is
	// touched a handful of times per pass rather than once per item.
	p.stride = int64(max(1, len(items)/(4*p.chunks)))
}

// handOut hands p's chunks (set by setPass) to the workers, starting them
// on demand; it does not wait for them (the caller waits on p.wg).
// inFlight is the most passes handed out at once: the work channel holds
// that many passes' chunks, so the sends never block.
func (r *itemRun[T]) handOut(ctx context.Context, p *pass[T], inFlight int) {
	if r.work == nil {
		r.work = make(chan chunkRef[T], inFlight*r.e.cfg.Threads)
	}
	for r.started < p.chunks {
		r.started++
		r.workers.Go(func() { r.worker(ctx) })
	}
	if ctx.Err() != nil {
		return
	}
	// Plain sends, no select on ctx.Done: the channel has room for every
	// chunk in flight, and a worker that gets a chunk after a cancel checks
	// ctx before its first item.
	p.wg.Add(p.chunks)
	for i := 0; i < p.chunks; i++ {
		r.work <- chunkRef[T]{p, i}
	}
}

func (r *itemRun[T]) worker(ctx context.Context) {
	for c := range r.work {
		r.processChunk(ctx, c.p, c.chunk)
		c.p.wg.Done()
	}
}

func (r *itemRun[T]) processChunk(ctx context.Context, p *pass[T], chunk int) {
	if p.ctx != nil {
		ctx = p.ctx
	}
	if r.e.batch != nil {
		n := len(p.items)
		lo, hi := chunk*n/p.chunks, (chunk+1)*n/p.chunks
		if p.ends != nil {
			lo, hi = 0, p.ends[chunk]
			if chunk > 0 {
				lo = p.ends[chunk-1]
			}
		}
		if ctx.Err() != nil || lo == hi {
			return
		}
		r.processBatch(ctx, p.items[lo:hi])
		return
	}
	r.processItems(ctx, p)
}

// processItems claims strides of the pass's items until none are left or
// ctx ends, and counts their outcomes once at the end.
func (r *itemRun[T]) processItems(ctx context.Context, p *pass[T]) {
	// The pass's fields are read-only while it is handed out: load them
	// once, not after every claim (the cursor's atomic add forces reloads).
	items, stride := p.items, p.stride
	n := int64(len(items))
	var t tally
	for {
		hi := p.next.Add(stride)
		lo := hi - stride
		if lo >= n {
			break
		}
		next, end := int(lo), int(min(hi, n))
		for next < end {
			var stopped bool
			if next, stopped = r.processRange(ctx, items, next, end, &t); stopped {
				r.count(t.success, t.failure)
				return
			}
		}
	}
	r.count(t.success, t.failure)
}

// count adds an outcome to the item and to cfg.Counter (the run's totals
// are the items' sums, added up once at the end).
func (r *itemRun[T]) count(success, failure int64) {
	if success == 0 && failure == 0 {
		return
	}
	if success != 0 {
		r.success.Add(success)
	}
	if failure != 0 {
		r.failure.Add(failure)
	}
	if c := r.e.cfg.Counter; c != nil {
		c.Add(success, failure)
	}
}

type tally struct{ success, failure int64 }

// processRange processes items[lo:hi] until the end, a panic or ctx's end,
// and adds the outcomes to t. It returns the index after the last item
// handled, and whether ctx ended. Recovering here, once per range instead
// of once per item, keeps the per-item cost to the Process call and the
// position's store. Cancellation is checked once per block of ctxPollEvery
// items, which bounds how many items a worker can start after a cancel,
// with ctx.Err (an atomic load, set before cancel returns; a select on
// ctx.Done costs about twice as much); successes are counted once per call
// from the position.
func (r *itemRun[T]) processRange(ctx context.Context, items []T, lo, hi int, t *tally) (next int, stopped bool) {
	pos, failures := lo, int64(0) // the item in progress; failed items so far
	defer func() {
		if v := recover(); v != nil {
			failures++
			r.recordErr(ctx, "process", newPanicError("process", v))
			next, stopped = pos+1, false
		}
		t.success += int64(next-lo) - failures
		t.failure += failures
	}()
	job, shard := r.e.job, r.shard
	for pos < hi {
		if ctx.Err() != nil {
			return pos, true
		}
		for end := min(pos+ctxPollEvery, hi); pos < end; pos++ {
			if err := job.Process(ctx, shard, items[pos]); err != nil {
				failures++
				r.recordErr(ctx, "process", err)
			}
		}
	}
	return hi, false
}

// ctxPollEvery is the block of items processRange processes between two
// cancellation checks.
const ctxPollEvery = 16

func (r *itemRun[T]) processBatch(ctx context.Context, items []T) {
	n, err := r.callProcessBatch(ctx, items)
	skipped := 0
	// A Skipped counts only as returned: wrapped, it is part of a failure.
	if sk, ok := err.(*Skipped); ok && sk != nil {
		skipped, err = sk.N, nil
	}
	if err != nil {
		r.recordErr(ctx, "process batch", err)
		r.count(0, int64(len(items)))
		return
	}
	if n < 0 || n > len(items) || skipped < 0 || skipped > len(items)-n {
		r.recordErr(ctx, "process batch", ErrBadSucceeded)
		n = max(0, min(n, len(items)))
		skipped = max(0, min(skipped, len(items)-n))
	}
	// Skipped items are another batch's work, counted there.
	r.count(int64(n), int64(len(items)-n-skipped))
}

func (r *itemRun[T]) callProcessBatch(ctx context.Context, items []T) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			n, err = 0, newPanicError("process batch", v)
		}
	}()
	return r.e.batch.ProcessBatch(ctx, r.shard, items)
}

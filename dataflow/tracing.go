package dataflow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation name of the Node's tracer.
const TracerName = "github.com/shardflow/shardflow/dataflow"

// Span names: one run span per run on a server; under it one item span per
// shard item; under that one fetch span per Fetch and one process span per
// fetched batch. The contexts handed to Fetch, Process and ProcessBatch
// carry the fetch or process span, so spans of the user's own calls (a
// database client's) nest under them.
const (
	SpanRun     = "shardflow.run"
	SpanItem    = "shardflow.item"
	SpanFetch   = "shardflow.fetch"
	SpanProcess = "shardflow.process"
)

// Span attribute keys.
const (
	AttrJob      = attribute.Key("shardflow.job")
	AttrServer   = attribute.Key("shardflow.server")
	AttrSource   = attribute.Key("shardflow.source")
	AttrItems    = attribute.Key("shardflow.items")
	AttrItem     = attribute.Key("shardflow.item")
	AttrEpoch    = attribute.Key("shardflow.epoch")
	AttrFailover = attribute.Key("shardflow.failover")
	AttrBatch    = attribute.Key("shardflow.batch_size")
	AttrSuccess  = attribute.Key("shardflow.success")
	AttrFailure  = attribute.Key("shardflow.failure")
)

// tracerOf returns tp's tracer for this package, nil without a provider
// (then no span is started anywhere: no cost but a nil check).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName)
}

// startRunSpan starts the run span; the returned ctx carries it.
func startRunSpan(ctx context.Context, tr trace.Tracer, info RunInfo) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, SpanRun, trace.WithAttributes(
		AttrJob.String(info.JobName), AttrServer.String(info.ServerID),
		AttrSource.String(string(info.Reason.Source())), AttrItems.IntSlice(info.Items)))
}

// endSpan ends span (nil: none) with the outcome counts and err.
func endSpan(span trace.Span, success, failure int64, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(AttrSuccess.Int64(success), AttrFailure.Int64(failure))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startItemSpan starts a shard item's span under the run's.
func startItemSpan(ctx context.Context, tr trace.Tracer, job string, s Shard) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, SpanItem, trace.WithAttributes(AttrJob.String(job), AttrItem.Int(s.Item),
		AttrEpoch.Int64(s.Epoch), AttrFailover.Bool(s.Failover)))
}

// startFetchSpan starts a Fetch's span under the item's.
func (r *itemRun[T]) startFetchSpan(ctx context.Context) (context.Context, trace.Span) {
	if r.e.cfg.Tracer == nil {
		return ctx, nil
	}
	return r.e.cfg.Tracer.Start(ctx, SpanFetch, trace.WithAttributes(AttrItem.Int(r.shard.Item)))
}

// startProcessSpan starts the span of p's processing under the item's and
// keeps its context in p, for the workers' calls.
func (r *itemRun[T]) startProcessSpan(ctx context.Context, p *pass[T]) {
	p.ctx, p.span = nil, nil
	if r.e.cfg.Tracer == nil {
		return
	}
	p.ctx, p.span = r.e.cfg.Tracer.Start(ctx, SpanProcess, trace.WithAttributes(AttrItem.Int(r.shard.Item), AttrBatch.Int(len(p.items))))
}

// endProcessSpan ends p's span, once all its chunks are done.
func endProcessSpan[T any](p *pass[T]) {
	if p.span != nil {
		p.span.End()
		p.ctx, p.span = nil, nil
	}
}

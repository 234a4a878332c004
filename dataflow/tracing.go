package dataflow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation name of the Node's tracer.
const tracerName = "github.com/shardflow/shardflow/dataflow"

// Span names: one run span per run on a server; under it one item span per
// shard item; under that one fetch span per Fetch and one process span per
// fetched batch. The contexts handed to Fetch, Process and ProcessBatch
// carry the fetch or process span, so spans of the user's own calls (a
// database client's) nest under them.
const (
	spanRun     = "shardflow.run"
	spanItem    = "shardflow.item"
	spanFetch   = "shardflow.fetch"
	spanProcess = "shardflow.process"
)

// Span attribute keys.
const (
	attrJob      = attribute.Key("shardflow.job")
	attrServer   = attribute.Key("shardflow.server")
	attrSource   = attribute.Key("shardflow.source")
	attrItems    = attribute.Key("shardflow.items")
	attrItem     = attribute.Key("shardflow.item")
	attrEpoch    = attribute.Key("shardflow.epoch")
	attrFailover = attribute.Key("shardflow.failover")
	attrBatch    = attribute.Key("shardflow.batch_size")
	attrSuccess  = attribute.Key("shardflow.success")
	attrFailure  = attribute.Key("shardflow.failure")
)

// tracerOf returns tp's tracer for this package, nil without a provider
// (then no span is started anywhere: no cost but a nil check).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// startRunSpan starts the run span; the returned ctx carries it.
func startRunSpan(ctx context.Context, tr trace.Tracer, info RunInfo) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, spanRun, trace.WithAttributes(
		attrJob.String(info.JobName), attrServer.String(info.ServerID),
		attrSource.String(string(info.Reason.historySource())), attrItems.IntSlice(info.Items)))
}

// endSpan ends span (nil: none) with the outcome counts and err.
func endSpan(span trace.Span, success, failure int64, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attrSuccess.Int64(success), attrFailure.Int64(failure))
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
	return tr.Start(ctx, spanItem, trace.WithAttributes(attrJob.String(job), attrItem.Int(s.Item),
		attrEpoch.Int64(s.Epoch), attrFailover.Bool(s.Failover)))
}

// startFetchSpan starts a Fetch's span under the item's.
func (r *itemRun[T]) startFetchSpan(ctx context.Context) (context.Context, trace.Span) {
	if r.e.cfg.Tracer == nil {
		return ctx, nil
	}
	return r.e.cfg.Tracer.Start(ctx, spanFetch, trace.WithAttributes(attrItem.Int(r.shard.Item)))
}

// startProcessSpan starts the span of p's processing under the item's and
// keeps its context in p, for the workers' calls.
func (r *itemRun[T]) startProcessSpan(ctx context.Context, p *pass[T]) {
	p.ctx, p.span = nil, nil
	if r.e.cfg.Tracer == nil {
		return
	}
	p.ctx, p.span = r.e.cfg.Tracer.Start(ctx, spanProcess, trace.WithAttributes(attrItem.Int(r.shard.Item), attrBatch.Int(len(p.items))))
}

// endProcessSpan ends p's span, once all its chunks are done.
func endProcessSpan[T any](p *pass[T]) {
	if p.span != nil {
		p.span.End()
		p.ctx, p.span = nil, nil
	}
}

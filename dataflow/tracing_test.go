package dataflow

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardflow/shardflow/coord/memstore"
)

// tracedJob streams two batches per item, then nothing; each Process
// starts a span of its own from its ctx, as a database client would.
type tracedJob struct {
	mu      sync.Mutex
	fetches map[int]int
}

func (j *tracedJob) Fetch(_ context.Context, s Shard) ([]int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fetches[s.Item]++
	if j.fetches[s.Item] > 2 {
		return nil, nil
	}
	return []int{1, 2, 3}, nil
}

func (j *tracedJob) Process(ctx context.Context, _ Shard, _ int) error {
	_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("user").Start(ctx, "user.query")
	span.End()
	return nil
}

// With a TracerProvider, a run is one span; under it one span per item;
// under each item its Fetch and processed-batch spans; and the spans the
// user's Process starts from its ctx nest under the batch's span.
func TestNodeTracing(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelinedFetch=%v", pipelined), func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "t-0", TracerProvider: tp})
			if err != nil {
				t.Fatal(err)
			}
			defer stopNode(t, n)
			l := newAfterListener()
			cfg := JobConfig{JobName: "traced", ShardingTotalCount: 2, StreamingProcess: true, PipelinedFetch: pipelined,
				ConcurrentDataProcessThreadCount: 2}
			if err := AddJob(t.Context(), n, cfg, Job[int](&tracedJob{fetches: map[int]int{}}), WithListeners(l)); err != nil {
				t.Fatal(err)
			}
			if err := n.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := n.TriggerLocal("traced"); err != nil {
				t.Fatal(err)
			}
			if ev := l.next(t); ev.res.Success != 12 {
				t.Fatalf("run %+v, want 12 successes (2 items x 2 batches x 3)", ev.res)
			}

			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			count := map[string]int{}
			for _, s := range sr.Ended() {
				byID[s.SpanContext().SpanID()] = s
				count[s.Name()]++
			}
			want := map[string]int{spanRun: 1, spanItem: 2, spanFetch: 6, spanProcess: 4, "user.query": 12}
			for name, c := range want {
				if count[name] != c {
					t.Errorf("%d %s spans, want %d (all: %v)", count[name], name, c, count)
				}
			}
			parentName := func(s sdktrace.ReadOnlySpan) string {
				if p, ok := byID[s.Parent().SpanID()]; ok {
					return p.Name()
				}
				return ""
			}
			wantParent := map[string]string{spanRun: "", spanItem: spanRun, spanFetch: spanItem, spanProcess: spanItem, "user.query": spanProcess}
			var items []int64
			for _, s := range sr.Ended() {
				if got := parentName(s); got != wantParent[s.Name()] {
					t.Errorf("span %s has parent %q, want %q", s.Name(), got, wantParent[s.Name()])
				}
				if s.Name() == spanItem {
					for _, a := range s.Attributes() {
						if a.Key == attrItem {
							items = append(items, a.Value.AsInt64())
						}
						if a.Key == attrSuccess && a.Value.AsInt64() != 6 {
							t.Errorf("item span success %d, want 6", a.Value.AsInt64())
						}
					}
				}
				if s.Name() == spanRun && s.SpanContext().TraceID() != sr.Ended()[0].SpanContext().TraceID() {
					t.Errorf("spans of one run in different traces")
				}
			}
			slices.Sort(items)
			if !slices.Equal(items, []int64{0, 1}) {
				t.Errorf("item spans for items %v, want [0 1]", items)
			}
		})
	}
}

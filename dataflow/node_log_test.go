package dataflow

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
)

// attrCounter is a slog.Handler that keeps, for every record, how many
// times each attribute key appears on it (its own and the logger's With).
type attrCounter struct {
	mu      *sync.Mutex
	records *[]map[string]int
	msgs    *[]string
	with    []slog.Attr
	seen    chan string
}

func (h attrCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h attrCounter) Handle(_ context.Context, r slog.Record) error {
	keys := map[string]int{}
	for _, a := range h.with {
		keys[a.Key]++
	}
	r.Attrs(func(a slog.Attr) bool { keys[a.Key]++; return true })
	h.mu.Lock()
	*h.records = append(*h.records, keys)
	*h.msgs = append(*h.msgs, r.Message)
	h.mu.Unlock()
	select {
	case h.seen <- r.Message:
	default:
	}
	return nil
}

func (h attrCounter) WithAttrs(as []slog.Attr) slog.Handler {
	h.with = append(append([]slog.Attr(nil), h.with...), as...)
	return h
}

func (h attrCounter) WithGroup(string) slog.Handler { return h }

// TestNodeLogsServerOnce: every line of a Node and of its coordination
// carries the server attribute exactly once (issue 25: lines of a worker
// repeated it; the Node's own lines had none).
func TestNodeLogsServerOnce(t *testing.T) {
	var records []map[string]int
	var msgs []string
	h := attrCounter{mu: &sync.Mutex{}, records: &records, msgs: &msgs, seen: make(chan string, 64)}
	n, err := NewNode(NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "w1", Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := AddJob(t.Context(), n, JobConfig{JobName: "fails", ShardingTotalCount: 2, ErrorPolicy: ErrorPolicyReturn}, Job[int](failingJob{})); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.TriggerLocal("fails"); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for msg := ""; msg != "dataflow: job error"; {
		select {
		case msg = <-h.seen:
		case <-timeout:
			t.Fatal("no \"dataflow: job error\" line")
		}
	}
	stopNode(t, n)
	h.mu.Lock()
	defer h.mu.Unlock()
	coordLines := 0
	for i, keys := range records {
		if keys["server"] != 1 {
			t.Errorf("line %q has the server attribute %d times, want once: %v", msgs[i], keys["server"], keys)
		}
		if keys["job"] > 1 {
			t.Errorf("line %q repeats the job attribute: %v", msgs[i], keys)
		}
		if msgs[i] != "dataflow: job error" {
			coordLines++
		}
	}
	if coordLines == 0 {
		t.Fatalf("only the Node's own line was logged (%q); the check needs coord's lines too", msgs)
	}
}

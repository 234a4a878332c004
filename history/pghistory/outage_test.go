package pghistory_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// oneItem processes one value per run.
type oneItem struct{}

func (oneItem) Fetch(_ context.Context, s dataflow.Shard) ([]int, error) { return []int{s.Item}, nil }
func (oneItem) Process(context.Context, dataflow.Shard, int) error       { return nil }

// runs hands every finished run to the test.
type runs chan dataflow.RunResult

func (runs) BeforeRun(context.Context, dataflow.RunInfo) {}
func (r runs) AfterRun(_ context.Context, _ dataflow.RunInfo, res dataflow.RunResult) {
	r <- res
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With the history database stopped, runs go on and complete; the buffer
// keeps what fits and counts the rest as dropped, logged once; after
// Postgres comes back the kept records are written and recording resumes.
func TestRecordingSurvivesStoppedPostgres(t *testing.T) {
	pg := integration.StartPostgres(t)
	pg.RequireControl(t)
	pool := newPool(t, pg)
	logs := &lockedBuf{}
	buf, st, err := pghistory.NewBuffer(t.Context(), pghistory.Config{Pool: pool, Retention: -1},
		history.BufferConfig{Size: 3, BatchSize: 1, FlushInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
			WriteTimeout: 5 * time.Second, LogInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = buf.Stop(context.Background()) }()
	n, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "solo", History: buf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	done := make(runs, 16)
	if err := dataflow.AddJob(t.Context(), n, dataflow.JobConfig{JobName: "j", ShardingTotalCount: 1}, dataflow.Job[int](oneItem{}), dataflow.WithListeners(done)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	runOnce := func() {
		t.Helper()
		if err := n.TriggerLocal("j"); err != nil {
			t.Fatal(err)
		}
		if res := testwait.Recv(t, 30*time.Second, "a run to finish", done); res.Success != 1 || res.Err != nil {
			t.Fatalf("run %+v, want 1 success and no error", res)
		}
	}
	rows := func(want int) {
		t.Helper()
		testwait.ForNoError(t, 60*time.Second, fmt.Sprintf("%d history rows", want), func() error {
			recs, err := st.Runs(t.Context(), history.Filter{Job: "j"})
			if err != nil {
				return err
			}
			if len(recs) != want {
				return fmt.Errorf("%d rows", len(recs))
			}
			return nil
		})
	}

	runOnce()
	rows(1)
	testwait.For(t, 10*time.Second, "the first write counted", func() bool { return buf.Stats().Written == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		runOnce() // runs go on: the recorder never blocks them
	}
	if s := buf.Stats(); s.Dropped != 2 || s.Queued != 3 || s.Written != 1 {
		t.Fatalf("buffer with Postgres down: %v; want 3 queued (its size), 2 dropped, 1 written", s)
	}
	testwait.For(t, 30*time.Second, "a failed write and the drop log line", func() bool {
		return buf.Stats().WriteErrors > 0 && strings.Contains(logs.String(), "records dropped")
	})
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rows(4) // the 3 kept records
	runOnce()
	rows(5) // recording resumed
	// The rows are visible once COPY commits, a moment before the Writer
	// counts them: wait for the count, then compare the metrics.
	testwait.For(t, 10*time.Second, "the fifth write counted", func() bool { return buf.Stats().Written == 5 })
	if got := strings.Count(logs.String(), "records dropped"); got != 1 {
		t.Fatalf("%d drop log lines in one log interval, want 1:\n%s", got, logs.String())
	}
	want := `
# HELP shardflow_history_records_total History records by fate: written by the Writer, or dropped (buffer full, or left at stop).
# TYPE shardflow_history_records_total counter
shardflow_history_records_total{result="dropped"} 2
shardflow_history_records_total{result="written"} 5
`
	if err := testutil.CollectAndCompare(buf, strings.NewReader(want), "shardflow_history_records_total"); err != nil {
		t.Fatal(err)
	}
}

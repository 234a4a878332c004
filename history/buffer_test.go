package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeWriter stores batches; fail makes Write fail, block makes it wait.
type fakeWriter struct {
	mu      sync.Mutex
	batches [][]Record
	fail    bool
	block   chan struct{} // when non-nil, Write waits for it to close (or ctx)
}

func (w *fakeWriter) Write(ctx context.Context, recs []Record) error {
	w.mu.Lock()
	block, fail := w.block, w.fail
	w.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("connection refused")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, append([]Record(nil), recs...))
	return nil
}

func (w *fakeWriter) set(fail bool, block chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail, w.block = fail, block
}

func (w *fakeWriter) items() (items []int, batches int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.batches {
		for _, r := range b {
			items = append(items, r.Item)
		}
	}
	return items, len(w.batches)
}

// syncBuf is a log sink safe for the buffer's goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

func recs(from, n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Job: "j", Server: "s", Item: from + i, Source: SourceNormal}
	}
	return out
}

func newTestBuffer(t *testing.T, w Writer, logs *syncBuf, size, batch int) *Buffer {
	t.Helper()
	b, err := NewBuffer(BufferConfig{Writer: w, Size: size, BatchSize: batch, FlushInterval: time.Second,
		MaxRetryInterval: 4 * time.Second, LogInterval: time.Minute,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

func TestBufferWritesBatchesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		b := newTestBuffer(t, w, &syncBuf{}, 100, 4)
		b.Record(recs(0, 3)...)
		synctest.Wait()
		if _, n := w.items(); n != 0 {
			t.Fatalf("%d batches written before the batch filled or the interval passed", n)
		}
		b.Record(recs(3, 6)...) // 9 queued: a full batch kicks a flush at once
		synctest.Wait()
		items, n := w.items()
		if fmt.Sprint(items) != "[0 1 2 3 4 5 6 7 8]" || n != 3 {
			t.Fatalf("written items %v in %d batches; want 0..8 in 3 batches (4+4+1)", items, n)
		}
		b.Record(recs(9, 1)...)
		time.Sleep(time.Second) // the flush interval
		synctest.Wait()
		if items, _ := w.items(); len(items) != 10 {
			t.Fatalf("after the flush interval %d items written, want 10", len(items))
		}
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(); s.Written != 10 || s.Dropped != 0 || s.Queued != 0 {
			t.Fatalf("stats %v", s)
		}
	})
}

func TestBufferDownWriterDropsCountsLogsOnceAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		w.set(true, nil)
		logs := &syncBuf{}
		b := newTestBuffer(t, w, logs, 10, 5)
		// 30 records while the writer is down: 10 kept, 20 dropped; the
		// caller never waits.
		for i := range 30 {
			b.Record(recs(i, 1)...)
		}
		time.Sleep(10 * time.Second) // several retries
		synctest.Wait()
		s := b.Stats()
		if s.Queued != 10 || s.Dropped != 20 || s.Written != 0 || s.WriteErrors < 2 {
			t.Fatalf("stats with the writer down: %v; want 10 queued, 20 dropped, 0 written, >= 2 write errors", s)
		}
		if n := logs.count("records dropped"); n != 1 {
			t.Fatalf("%d drop log lines within one log interval, want 1:\n%s", n, logs.b.String())
		}
		if n := logs.count("writing records failed"); n != 1 {
			t.Fatalf("%d write-error log lines within one log interval, want 1", n)
		}
		b.Record(recs(30, 5)...) // dropped too
		time.Sleep(time.Minute)  // next log interval
		synctest.Wait()
		if n := logs.count("records dropped"); n != 2 {
			t.Fatalf("%d drop log lines after a second interval with new drops, want 2", n)
		}

		w.set(false, nil) // back up: the kept records go out after the retry pause
		time.Sleep(5 * time.Second)
		synctest.Wait()
		items, _ := w.items()
		if fmt.Sprint(items) != "[0 1 2 3 4 5 6 7 8 9]" {
			t.Fatalf("after recovery wrote %v, want the 10 kept records 0..9 in order", items)
		}
		b.Record(recs(100, 1)...)
		time.Sleep(time.Second)
		synctest.Wait()
		if items, _ := w.items(); len(items) != 11 {
			t.Fatalf("recording did not resume: %d written, want 11", len(items))
		}
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(); s.Dropped != 25 || s.Written != 11 {
			t.Fatalf("final stats %v; want 25 dropped, 11 written", s)
		}
	})
}

func TestBufferSlowWriterNeverBlocksRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		release := make(chan struct{})
		w.set(false, release)
		b := newTestBuffer(t, w, &syncBuf{}, 8, 2)
		b.Record(recs(0, 2)...) // a full batch: the writer now hangs on it
		synctest.Wait()
		for i := range 100 {
			b.Record(recs(2+i, 1)...) // returns although the writer hangs
		}
		if s := b.Stats(); s.Queued != 8 || s.Dropped != 94 {
			t.Fatalf("stats with a hung writer %v; want 8 queued, 94 dropped", s)
		}
		close(release)
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if items, _ := w.items(); len(items) != 8 {
			t.Fatalf("%d written after release and stop, want 8", len(items))
		}
	})
}

func TestBufferStopBoundedByCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		w.set(false, make(chan struct{})) // hangs forever
		b := newTestBuffer(t, w, &syncBuf{}, 100, 50)
		b.Record(recs(0, 7)...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := b.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with a hung writer = %v, want DeadlineExceeded", err)
		}
		if s := b.Stats(); s.Dropped != 7 || s.Queued != 0 {
			t.Fatalf("stats %v; want the 7 queued records dropped", s)
		}
		b.Record(recs(7, 1)...)
		if s := b.Stats(); s.Dropped != 8 {
			t.Fatalf("a record after Stop was not counted as dropped: %v", s)
		}
		if err := b.Stop(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second Stop = %v, want the first one's result", err)
		}
	})
}

func TestBufferStopBeforeStart(t *testing.T) {
	b, err := NewBuffer(BufferConfig{Writer: &fakeWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	b.Record(recs(0, 3)...)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.Dropped != 3 {
		t.Fatalf("stats %v; want 3 dropped", s)
	}
	if err := b.Start(context.Background()); !errors.Is(err, ErrBufferStarted) {
		t.Fatalf("Start after Stop = %v, want ErrBufferStarted", err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	if _, err := NewBuffer(BufferConfig{}); !errors.Is(err, ErrNoWriter) {
		t.Fatalf("NewBuffer without writer = %v", err)
	}
}

// A Buffer runs once: a second Start and a Start after Stop return
// ErrBufferStarted; Stop writes what is queued and waits for the loop.
func TestBufferStartsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		b := newTestBuffer(t, w, &syncBuf{}, 100, 50)
		if err := b.Start(context.Background()); !errors.Is(err, ErrBufferStarted) {
			t.Fatalf("second Start = %v, want ErrBufferStarted", err)
		}
		b.Record(recs(0, 3)...)
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.life.Done():
		default:
			t.Fatal("Stop returned before the loop")
		}
		if items, _ := w.items(); len(items) != 3 {
			t.Fatalf("%d written at Stop, want 3", len(items))
		}
		if err := b.Start(context.Background()); !errors.Is(err, ErrBufferStarted) {
			t.Fatalf("Start after Stop = %v, want ErrBufferStarted", err)
		}
		if err := b.Stop(context.Background()); err != nil {
			t.Fatalf("second Stop = %v", err)
		}
	})
}

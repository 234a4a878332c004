package coordtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// barrierLogMax bounds the lines a schedule keeps (the last ones).
const barrierLogMax = 200

// barrierLog is a slog handler that keeps the distribute-once barrier's
// debug lines (messages "distribute-once: ...": each decision with the set's
// registrations) of one schedule, numbered in the schedule's barrier
// sequence (onceLog) so that they interleave with its Once calls' enter and
// exit and the callbacks' starts. A barrier violation prints them. Other
// records go to next (quietLogger's handler) only.
type barrierLog struct {
	next  slog.Handler
	seq   func() int64
	attrs []slog.Attr
	mu    *sync.Mutex
	lines *[]string
}

func newBarrierLog(next slog.Handler, seq func() int64) *barrierLog {
	return &barrierLog{next: next, seq: seq, mu: new(sync.Mutex), lines: new([]string)}
}

func (h *barrierLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug
}

func (h *barrierLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "distribute-once") {
		var b strings.Builder
		fmt.Fprintf(&b, "#%d %s", h.seq(), r.Message)
		for _, a := range h.attrs {
			fmt.Fprintf(&b, " %s", a)
		}
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s", a)
			return true
		})
		h.mu.Lock()
		*h.lines = append(*h.lines, b.String())
		if n := len(*h.lines); n > barrierLogMax {
			*h.lines = (*h.lines)[n-barrierLogMax:]
		}
		h.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *barrierLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	c.next = h.next.WithAttrs(attrs)
	return &c
}

func (h *barrierLog) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// note adds a line of the sim's own.
func (h *barrierLog) note(line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, line)
}

// text returns the kept lines.
func (h *barrierLog) text() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.lines...)
}

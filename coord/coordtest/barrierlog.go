package coordtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// barrierLogMax bounds the lines a schedule keeps (the last ones), and
// protocolLogMax its protocol log's.
const (
	barrierLogMax  = 200
	protocolLogMax = 400
)

// barrierLog is a slog handler that keeps the distribute-once barrier's
// debug lines (messages "distribute-once: ...": each decision with the set's
// registrations) of one schedule, numbered in the schedule's barrier
// sequence (onceLog) so that they interleave with its Once calls' enter and
// exit and the callbacks' starts. A barrier violation prints them. Other
// records go to next (quietLogger's handler) only.
//
// It also keeps the schedule's protocol log: every server's records at
// Info and above (elections, reshards, registrations lost and made again,
// servers gone offline, warnings), with the schedule's steps between them
// (noteStep), which any violation prints: a failure that does not replay
// (the open seeds, docs/development.md) leaves what each server did.
type barrierLog struct {
	next  slog.Handler
	seq   func() int64
	attrs []slog.Attr
	mu    *sync.Mutex
	lines *[]string
	proto *[]string
}

func newBarrierLog(next slog.Handler, seq func() int64) *barrierLog {
	return &barrierLog{next: next, seq: seq, mu: new(sync.Mutex), lines: new([]string), proto: new([]string)}
}

// keep appends line to lines, keeping the last max.
func keep(lines *[]string, line string, max int) {
	*lines = append(*lines, line)
	if n := len(*lines); n > max {
		*lines = (*lines)[n-max:]
	}
}

func (h *barrierLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug
}

func (h *barrierLog) Handle(ctx context.Context, r slog.Record) error {
	barrier := strings.HasPrefix(r.Message, "distribute-once")
	if barrier || r.Level >= slog.LevelInfo {
		var b strings.Builder
		if barrier {
			fmt.Fprintf(&b, "#%d ", h.seq())
		} else {
			fmt.Fprintf(&b, "%s %s ", r.Time.Format("15:04:05.000"), r.Level)
		}
		b.WriteString(r.Message)
		for _, a := range h.attrs {
			fmt.Fprintf(&b, " %s", a)
		}
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s", a)
			return true
		})
		h.mu.Lock()
		if barrier {
			keep(h.lines, b.String(), barrierLogMax)
		} else {
			keep(h.proto, b.String(), protocolLogMax)
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

// noteStep adds a step of the schedule to the protocol log.
func (h *barrierLog) noteStep(step string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep(h.proto, "-- step: "+step, protocolLogMax)
}

// protocol returns the protocol log's kept lines.
func (h *barrierLog) protocol() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.proto...)
}

// text returns the kept lines.
func (h *barrierLog) text() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.lines...)
}

package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// escapeWriter writes what commands print with control characters made
// visible: a server id, command or parameter read from the store may hold
// terminal escapes (ESC [ ...: recolour, move the cursor, rewrite the
// screen) that must never reach the operator's terminal raw. Newlines and
// tabs pass (the commands' own layout); every other C0 byte, DEL and the
// C1 controls (U+0080-U+009F, in UTF-8) become \u00XX, which also keeps
// JSON output valid. printable does the same for one field, newlines
// included, so a value cannot fake a row.
type escapeWriter struct {
	mu      sync.Mutex // a command's goroutines (a worker's log) share it
	w       io.Writer
	pending bool // the last Write ended with 0xC2, the lead byte of a C1 control
}

func newEscapeWriter(w io.Writer) *escapeWriter { return &escapeWriter{w: w} }

func (e *escapeWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	b.Grow(len(p))
	i := 0
	if e.pending {
		e.pending = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] <= 0x9f {
			fmt.Fprintf(&b, `\u%04x`, p[0])
			i = 1
		} else {
			b.WriteByte(0xc2)
		}
	}
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, c)
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, p[i+1])
			i++
		case c == 0xc2 && i+1 == len(p):
			e.pending = true
		default:
			b.WriteByte(c)
		}
	}
	if _, err := io.WriteString(e.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a lead byte held back at the end of the output.
func (e *escapeWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending {
		e.pending = false
		_, _ = e.w.Write([]byte{0xc2})
	}
}

// printable returns one field of a table or line with every control
// character, newlines and tabs included, shown as \u00XX.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

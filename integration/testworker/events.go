package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// event is one line of the worker's output protocol. Fields that do not
// apply to an event kind are omitted; Item is a pointer so that item 0 is
// printed while "no item" is not.
type event struct {
	Ev       string `json:"ev"`
	Server   string `json:"server,omitempty"`
	Item     *int   `json:"item,omitempty"`
	Epoch    int64  `json:"epoch,omitempty"`
	Failover bool   `json:"failover,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	// Checked is when the fencing check of a commit started (Unix ms).
	Checked int64  `json:"checked,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Err     string `json:"err,omitempty"`
	// Run, on "once" events, is when the run the callback belongs to
	// started on this server (Unix ms; dataflow.RunInfo.Started).
	Run int64 `json:"run,omitempty"`
	T   int64 `json:"t"`
}

// emitter writes events as JSON lines. Each event is marshalled and written
// with one Write call under a mutex, so lines never interleave; w is expected
// to be unbuffered (os.Stdout), so a line is visible to the reader as soon as
// emit returns — the fault tests rely on that to order events against kills.
type emitter struct {
	mu     sync.Mutex
	w      io.Writer
	server string
	now    func() time.Time
}

func newEmitter(w io.Writer, server string) *emitter {
	return &emitter{w: w, server: server, now: time.Now}
}

// emit stamps e with the server id and the current time and writes it.
// Write errors are dropped: a worker whose stdout is gone has no one to tell.
func (em *emitter) emit(e event) {
	if e.Server == "" {
		e.Server = em.server
	}
	e.T = em.now().UnixMilli()
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	em.mu.Lock()
	defer em.mu.Unlock()
	_, _ = em.w.Write(b)
}

func (em *emitter) errorf(err error) {
	em.emit(event{Ev: "error", Server: em.server, Err: err.Error()})
}

func itemPtr(i int) *int { return &i }

package history

import (
	"context"
	"fmt"
	"time"
)

// Source says why an item ran, as ElasticJob's execution source.
type Source string

// Sources of an item run.
const (
	// SourceNormal: the job's cron schedule fired.
	SourceNormal Source = "normal"
	// SourceMisfire: the catch-up run after fires missed during a run.
	SourceMisfire Source = "misfire"
	// SourceFailover: this server took the item over from a crashed one.
	SourceFailover Source = "failover"
	// SourceManual: an operator's or the program's trigger.
	SourceManual Source = "manual"
)

// Valid reports whether s is one of the four sources.
func (s Source) Valid() bool {
	switch s {
	case SourceNormal, SourceMisfire, SourceFailover, SourceManual:
		return true
	}
	return false
}

// Record is one shard item's run on one server. Its JSON form is the one
// `shardflow history --json` prints: exactly these ten fields, and
// workflowRun for an item run in a workflow run.
type Record struct {
	// Job is the job's name.
	Job string `json:"job"`
	// Server is the id of the server that ran the item.
	Server string `json:"server"`
	// Item is the shard item.
	Item int `json:"item"`
	// Epoch is the item's fencing epoch during the run: who owned the item
	// under which epoch.
	Epoch int64 `json:"epoch"`
	// Source says why the item ran.
	Source Source `json:"source"`
	// Begin and End bound the item's run on this server.
	Begin time.Time `json:"begin"`
	End   time.Time `json:"end"`
	// Success and Failure are the item's counted outcomes in the run.
	Success int64 `json:"success"`
	Failure int64 `json:"failure"`
	// Error is the item's first error ("" if none).
	Error string `json:"error"`
	// WorkflowRun is the workflow run the item ran in (a job with
	// dependsOn, or one others depend on); "" for a job in no workflow.
	WorkflowRun string `json:"workflowRun,omitempty"`
}

// Duration is End - Begin.
func (r Record) Duration() time.Duration { return r.End.Sub(r.Begin) }

// Recorder receives item runs. Record must not block and must not fail the
// caller: an implementation that cannot keep a record drops it and counts
// the drop. It is called concurrently from the jobs' run goroutines.
type Recorder interface {
	Record(recs ...Record)
}

// Writer stores a batch of records; the Buffer calls it from one goroutine.
// An error means the batch was not stored and may be retried.
type Writer interface {
	Write(ctx context.Context, recs []Record) error
}

// Filter selects records. The zero Filter selects every record.
type Filter struct {
	// Job, when not "", selects one job.
	Job string
	// Server, when not "", selects one server.
	Server string
	// Item, when not nil, selects one shard item.
	Item *int
	// WorkflowRun, when not "", selects one workflow run's item runs
	// (every step's).
	WorkflowRun string
	// Since, when not zero, selects records that ended at or after it.
	Since time.Time
	// Limit, when > 0, caps the number of records returned.
	Limit int
}

// Match reports whether r passes f (Limit aside).
func (f Filter) Match(r Record) bool {
	return (f.Job == "" || r.Job == f.Job) &&
		(f.Server == "" || r.Server == f.Server) &&
		(f.Item == nil || r.Item == *f.Item) &&
		(f.WorkflowRun == "" || r.WorkflowRun == f.WorkflowRun) &&
		(f.Since.IsZero() || !r.End.Before(f.Since))
}

// Reader answers the history questions.
type Reader interface {
	// Runs returns the records f selects, newest (latest Begin) first.
	Runs(ctx context.Context, f Filter) ([]Record, error)
	// OwnersAt returns, for each item of the selected jobs (f.Job, f.Item
	// and f.Server narrow it; f.Since and f.Limit are ignored), the run that
	// had begun latest at or before at: the server that owned the item at
	// that instant and under which epoch. Ordered by job, then item.
	OwnersAt(ctx context.Context, f Filter, at time.Time) ([]Record, error)
}

// ErrBadSource is returned for a source outside the four known ones.
var ErrBadSource = fmt.Errorf("history: unknown source; use %s, %s, %s or %s", SourceNormal, SourceMisfire, SourceFailover, SourceManual)

package dataflow

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// ErrorPolicy says what a run does with the first error of user code; see
// jobconfig.ErrorPolicy.
type ErrorPolicy = jobconfig.ErrorPolicy

// Error policies, re-exported from jobconfig for convenience.
const (
	// ErrorPolicyLog logs each shard item's first error with slog (default).
	ErrorPolicyLog = jobconfig.ErrorPolicyLog
	// ErrorPolicyReturn returns the errors from the run, to the job's
	// listeners (RunResult.Err) and to NodeConfig.OnError.
	ErrorPolicyReturn = jobconfig.ErrorPolicyReturn
	// ErrorPolicyIgnore drops errors silently; failures are still counted.
	ErrorPolicyIgnore = jobconfig.ErrorPolicyIgnore
)

// Sentinel errors of package dataflow.
var (
	// ErrPanic: user code (Fetch, Process or ProcessBatch) panicked. The
	// panic was recovered and counted as a failure; unwrap *PanicError for
	// the value and the stack.
	ErrPanic = errors.New("dataflow: user code panicked (recovered and counted as a failure); fix the panic shown with its stack")
	// ErrBadSucceeded: ProcessBatch returned a succeeded count outside
	// 0..len(items), or a Skipped.N outside 0..len(items)-succeeded. The
	// counts were clamped; return how many items succeeded.
	ErrBadSucceeded = errors.New("dataflow: ProcessBatch returned a succeeded count outside 0..len(items); return the number of items that succeeded")
	// ErrNoJob: the named job is not added to this Node. Check Node.Jobs.
	ErrNoJob = errors.New("dataflow: no such job on this node; add it with AddJob first (see Node.Jobs)")
	// ErrJobExists: a job with this name is already added to this Node.
	ErrJobExists = errors.New("dataflow: a job with this name is already added to this node; remove it first or pick another JobName")
	// ErrNodeStopped: the Node is stopping or stopped and accepts no jobs or triggers.
	ErrNodeStopped = errors.New("dataflow: node is stopped; create a new Node")
	// ErrNoStore: NewNode was given no NodeConfig.Store.
	ErrNoStore = errors.New("dataflow: NodeConfig.Store is nil; pass zkstore.Open(ctx, zkstore.Config{Servers: ...}) for a ZooKeeper cluster, or memstore.NewServer().Connect() for one process with no cluster")
	// ErrBadCron: a job's Cron does not parse.
	ErrBadCron = errors.New("dataflow: invalid cron expression; use six fields with seconds, e.g. \"0/5 * * * * ?\"")
)

// PanicError is a recovered panic of user code. It unwraps to ErrPanic.
type PanicError struct {
	// Op is "fetch", "process" or "process batch".
	Op string
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack at the recover.
	Stack []byte
}

// Error names the operation and the panic value; the stack is in Stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("dataflow: %s panicked: %v", e.Op, e.Value)
}

// Unwrap makes errors.Is(err, ErrPanic) true.
func (e *PanicError) Unwrap() error { return ErrPanic }

func newPanicError(op string, v any) *PanicError {
	return &PanicError{Op: op, Value: v, Stack: debug.Stack()}
}

// ItemError is the first error of one shard item in one run.
type ItemError struct {
	// Job is the job name.
	Job string
	// Item is the shard item.
	Item int
	// Op is "fetch", "process" or "process batch".
	Op string
	// Err is the error returned by user code, or a *PanicError.
	Err error
}

// Error names the job, the item and the operation.
func (e *ItemError) Error() string {
	return fmt.Sprintf("dataflow: job %q shard item %d: %s: %v", e.Job, e.Item, e.Op, e.Err)
}

// Unwrap returns the user code's error.
func (e *ItemError) Unwrap() error { return e.Err }
